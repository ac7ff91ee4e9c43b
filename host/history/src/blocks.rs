//! Where a history stream reads: a chain's canonical blocks beyond its log
//! window ([`Blocks`]: its nodes, or a devnet chain's archive), and its log
//! ([`Reading`]).

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{B256, U64};
use serde_json::json;

use chainsieve_eventlog::EventLog;
use chainsieve_model::Block;
use chainsieve_node::{At, Call, NodeError, NodePool, blocks, decode};

use crate::archive::Archive;
use crate::limits::Budget;

/// Where a stream reads.
#[derive(Debug)]
pub struct Reading {
    pub blocks: Blocks,
    /// Where the stream hands over.
    pub log: Arc<EventLog>,
}

/// What holds a chain's canonical blocks beyond its log window.
#[derive(Clone, Debug)]
pub enum Blocks {
    /// A node chain's nodes, and what the chain's streams may take of
    /// them together.
    Nodes {
        pool: Arc<NodePool>,
        /// The chain's calls a second, shared by its streams.
        budget: Arc<Budget>,
    },
    /// A devnet chain's archive.
    Archive(Arc<Archive>),
}

/// How long the nodes may take to answer one batch.
const BATCH_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the nodes may take to say which block is canonical at a
/// height.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// A block as far as [`Blocks::hash_of`] needs it.
#[derive(serde::Deserialize)]
struct Hashed {
    hash: B256,
}

impl Blocks {
    /// The oldest block held, where that is known (the nodes say only
    /// when asked for one).
    pub async fn oldest(&self) -> Result<Option<u64>, String> {
        match self {
            Blocks::Nodes { .. } => Ok(None),
            Blocks::Archive(archive) => {
                archive.oldest().await.map_err(|error| format!("{error:#}"))
            }
        }
    }

    /// The hash of the canonical block at `number`; `None` where it is
    /// not held.
    pub async fn hash_of(&self, number: u64) -> Result<Option<B256>, String> {
        match self {
            Blocks::Nodes { pool, .. } => {
                let call = [Call::new(
                    "eth_getBlockByNumber",
                    json!([U64::from(number), false]),
                )];
                let answer = pool
                    .batch_at(&call, At::Block(number), CHECK_TIMEOUT, None)
                    .await
                    .and_then(|mut answers| {
                        let raw = answers.pop().ok_or(NodeError::Closed)?;
                        decode::<Option<Hashed>>("eth_getBlockByNumber", &raw)
                    })
                    .map_err(|error| error.to_string())?;
                Ok(answer.map(|Hashed { hash }| hash))
            }
            Blocks::Archive(archive) => archive
                .block(number)
                .await
                .map(|block| block.map(|block| block.hash))
                .map_err(|error| format!("{error:#}")),
        }
    }

    /// Canonical blocks `bottom..=top` from one of those that hold them,
    /// consecutive from `bottom` (fewer when a node holds fewer); none
    /// when none could be read, with why.
    pub(crate) async fn read(&self, bottom: u64, top: u64) -> Result<Vec<Arc<Block>>, String> {
        match self {
            Blocks::Nodes { pool, budget } => {
                let mut reasons = Vec::new();
                for node in pool.order(At::Block(top)) {
                    let read = blocks::by_number(
                        |calls| async move {
                            budget
                                .take(u32::try_from(calls.len()).unwrap_or(u32::MAX))
                                .await;
                            node.batch_within(&calls, BATCH_TIMEOUT).await
                        },
                        bottom,
                        top,
                    )
                    .await;
                    match read {
                        Ok(read) if !read.is_empty() => return Ok(read),
                        Ok(_) => reasons.push(format!("{}: no block {bottom}", node.spec.name)),
                        Err(reason) => reasons.push(format!("{}: {reason}", node.spec.name)),
                    }
                }
                Err(reasons.join("; "))
            }
            Blocks::Archive(archive) => match archive.range(bottom, top).await {
                Ok(read) if !read.is_empty() => Ok(read),
                Ok(_) => Err(format!("the devnet's archive does not hold block {bottom}")),
                Err(error) => Err(format!("{error:#}")),
            },
        }
    }
}
