//! A block's body and logs, fetched from the chain's nodes with failover
//! and verified before it goes anywhere (docs/src/nodes.md, Verified
//! blocks): the nodes are asked one after another, those known to hold
//! the block first; an error, a timeout, a malformed answer or a block
//! that fails verification moves on to the next. A node whose block fails
//! verification while another's passes is set aside. When every node that
//! answered serves a block that fails the same way, the check is what is
//! wrong (a new header field, a chain's own encoding): the block goes
//! out, and that is logged and counted loudly.

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::B256;
use serde_json::json;
use serde_json::value::RawValue;

use chainsieve_model::Block;
use chainsieve_model::verify::{self, VerifyError};
use chainsieve_model::wire::NodeBlock;
use chainsieve_node::{Call, NodeError, NodePool, blocks, decode};

/// How long one node may take to answer a block before the next is asked.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// What fetching a block came to.
#[derive(Debug)]
pub enum Fetched {
    /// The block, and the node that served it.
    Block(Arc<Block>, usize),
    /// No node that answered has it (reorged away, or not imported yet).
    Missing,
    /// No node answered with a block that could go out.
    Failed(String),
}

/// A node's answer for one block.
enum Answer {
    Good(Arc<Block>),
    Missing,
    Wrong(Arc<Block>, VerifyError),
    Failed(NodeError),
}

/// Fetches block `hash` from the nodes in `order`. Also answers the nodes
/// to set aside, each with why: the caller changes their state (and
/// takes their votes away).
pub async fn by_hash(
    pool: &NodePool,
    order: &[usize],
    hash: B256,
) -> (Fetched, Vec<(usize, String)>) {
    let mut wrong: Vec<(usize, Arc<Block>, VerifyError)> = Vec::new();
    let mut failures = Vec::new();
    let mut missing = Vec::new();
    for &node in order {
        match ask(pool, node, hash).await {
            Answer::Good(block) => {
                return (Fetched::Block(block, node), set_aside(pool, &wrong));
            }
            Answer::Missing => missing.push(node),
            Answer::Wrong(block, error) => wrong.push((node, block, error)),
            Answer::Failed(error) => {
                failures.push((node, format!("{}: {error}", pool.node(node).spec.name)));
            }
        }
    }
    // Only when every node whose heads count served the block, and the
    // same wrong way, is the check taken for what is wrong: a node that
    // has not imported the block yet, or did not answer, may serve it
    // right later.
    let counting_elsewhere = missing
        .iter()
        .chain(failures.iter().map(|(node, _)| node))
        .any(|&node| pool.node(node).health().state().counts());
    if !counting_elsewhere && let Some(agreed) = agreed(&wrong) {
        let (node, block, error) = &wrong[0];
        tracing::error!(
            chain = %pool.chain(), block = block.number(), %hash, %error,
            nodes = wrong.len(),
            "every node that answered served this block failing the same check: the check is taken to be wrong and the block goes out unverified"
        );
        pool.unverified_blocks.inc();
        return (Fetched::Block(agreed, *node), Vec::new());
    }
    let aside = set_aside(pool, &wrong);
    if !missing.is_empty() && wrong.is_empty() && failures.is_empty() {
        return (Fetched::Missing, aside);
    }
    let mut reasons: Vec<String> = failures.into_iter().map(|(_, reason)| reason).collect();
    reasons.extend(
        wrong
            .iter()
            .map(|(node, _, error)| format!("{}: {error}", pool.node(*node).spec.name)),
    );
    reasons.extend(
        missing
            .iter()
            .map(|&node| format!("{}: does not have it", pool.node(node).spec.name)),
    );
    (Fetched::Failed(reasons.join("; ")), aside)
}

/// The block every wrong answer agrees on, if they all fail the same check
/// with the same content. (Rare, so compared by what it serializes to.)
fn agreed(wrong: &[(usize, Arc<Block>, VerifyError)]) -> Option<Arc<Block>> {
    let (_, first, error) = wrong.first()?;
    let content = |block: &Block| serde_json::to_string(block).ok();
    let expected = content(first)?;
    wrong
        .iter()
        .all(|(_, block, e)| {
            std::mem::discriminant(e) == std::mem::discriminant(error)
                && content(block).as_ref() == Some(&expected)
        })
        .then(|| first.clone())
}

/// The nodes that served a wrong block, counted, with why they are to be
/// set aside.
fn set_aside(pool: &NodePool, wrong: &[(usize, Arc<Block>, VerifyError)]) -> Vec<(usize, String)> {
    wrong
        .iter()
        .map(|(node, block, error)| {
            pool.node(*node).metrics.wrong_blocks.inc();
            let reason = format!(
                "served block {} failing verification: {error}",
                block.number()
            );
            (*node, reason)
        })
        .collect()
}

async fn ask(pool: &NodePool, node: usize, hash: B256) -> Answer {
    let calls = [
        Call::new("eth_getBlockByHash", json!([hash, true])),
        Call::new("eth_getBlockReceipts", json!([hash])),
    ];
    let results = match pool.node(node).batch_within(&calls, FETCH_TIMEOUT).await {
        Ok(results) => results,
        // A node may refuse the receipts of a block it does not have (an
        // "unknown block" error): a block reorged away, not a failure.
        Err(error @ NodeError::Rpc { .. }) => {
            let header = [Call::new("eth_getBlockByHash", json!([hash, false]))];
            return match pool.node(node).batch_within(&header, FETCH_TIMEOUT).await {
                Ok(answer) if answer.first().is_some_and(|raw| raw.get() == "null") => {
                    Answer::Missing
                }
                _ => Answer::Failed(error),
            };
        }
        Err(error) => return Answer::Failed(error),
    };
    match read(&results) {
        // Another block than the one asked for: not an answer.
        Ok(Some(block)) if block.hash != hash => {
            pool.node(node).metrics.errors.inc();
            Answer::Failed(NodeError::Decode {
                method: "eth_getBlockByHash".into(),
                reason: format!("asked for block {hash}, answered block {}", block.hash),
            })
        }
        Ok(Some(block)) => match verify::checked(block) {
            Ok(block) => Answer::Good(block),
            Err((block, error)) => Answer::Wrong(block, error),
        },
        Ok(None) => Answer::Missing,
        Err(error) => {
            pool.node(node).metrics.errors.inc();
            Answer::Failed(error)
        }
    }
}

/// Block `hash`'s answer: the block, and its receipts.
fn read(results: &[Box<RawValue>]) -> Result<Option<Arc<Block>>, NodeError> {
    let [block, receipts] = results else {
        return Err(NodeError::Decode {
            method: "eth_getBlockByHash".into(),
            reason: format!("{} answers to 2 calls", results.len()),
        });
    };
    let block: Option<NodeBlock> = decode("eth_getBlockByHash", block)?;
    block
        .map(|block| blocks::with_receipts(block, receipts))
        .transpose()
}

/// Blocks `bottom..=top` from one node, verified, with their receipts, in two
/// round trips; they stop at the first the node does not have. An error
/// or a block that fails verification fails the whole range (the caller
/// walks back by hash instead, with failover).
pub async fn range(
    pool: &NodePool,
    node: usize,
    bottom: u64,
    top: u64,
) -> Result<Vec<Arc<Block>>, String> {
    let node = pool.node(node);
    blocks::by_number(
        |calls| async move { node.batch_within(&calls, FETCH_TIMEOUT).await },
        bottom,
        top,
    )
    .await
    .map_err(|error| format!("{}: {error}", node.spec.name))
}
