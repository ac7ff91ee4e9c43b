//! History from the nodes (docs/src/api.md, History from the nodes): a
//! `fromBlock` older than the chain's log window is served by reading the
//! canonical blocks from the chain's nodes (a devnet chain's [`archive`]),
//! oldest first, until the log holds the rest. A task per stream
//! ([`reader`]) reads them in batches,
//! verified and linked by parent hash, into a bounded queue the
//! subscription's filter actor drains as fast as its reader reads: the
//! stream goes at the subscriber's pace, and the queue lets the next batch
//! be read while the last one is delivered.

pub mod archive;
pub mod limits;
mod reader;
pub mod stream;

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{B256, U64};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

use archive::Archive;
use chainsieve_bus::ChainLog;
use chainsieve_eventlog::EventLog;
use chainsieve_eventlog::cursor::Plan;
use chainsieve_model::Block;
use chainsieve_node::{At, Call, NodeError, NodePool, blocks, decode};
use chainsieve_usage::Meter;
use limits::{Admitted, Budget};

pub use reader::CHUNK;

/// EIP-1474's "resource unavailable": the nodes could not give the
/// history.
pub const UNAVAILABLE: i64 = -32002;

/// EIP-1474's "resource not found": the chain moved under the stream.
pub const GONE: i64 = -32001;

/// What a history stream hands its actor, in order.
#[derive(Debug)]
pub enum HistoryItem {
    /// The next canonical block, verified, whose parent was the block
    /// before.
    Block(Arc<Block>),
    /// The log holds the rest: the chain as it is canonical now from the
    /// block after the last one, whose parent that last one is.
    Seam(Plan),
    /// The stream cannot go on: the JSON-RPC error code and why, for the
    /// subscriber.
    Failed { code: i64, reason: String },
}

/// The actor's end of a history stream. Dropping it stops the reader.
#[derive(Debug)]
pub struct HistoryFeed {
    /// For a resume after a cursor: the first block's events up to this
    /// index were delivered before.
    pub after: Option<u32>,
    items: mpsc::Receiver<HistoryItem>,
    /// Cancels the reader when the subscription ends.
    _reader: DropGuard,
    /// The stream's place among `[history] max_streams`, given back with
    /// the feed.
    _admitted: Admitted,
    /// Counts the blocks handed over, in the subscriber's key's usage.
    meter: Option<Arc<Meter>>,
}

impl HistoryFeed {
    /// The feed, its blocks counted by `meter`.
    pub fn metered(self, meter: Option<Arc<Meter>>) -> Self {
        Self { meter, ..self }
    }

    /// The next item if one is ready; `None` while the reader is at work.
    /// A reader that stopped without a word fails the stream.
    pub fn try_next(&mut self) -> Option<HistoryItem> {
        match self.items.try_recv() {
            Ok(item) => {
                if let (HistoryItem::Block(_), Some(meter)) = (&item, &self.meter) {
                    meter.replayed(1);
                }
                Some(item)
            }
            Err(mpsc::error::TryRecvError::Empty) => None,
            Err(mpsc::error::TryRecvError::Disconnected) => Some(HistoryItem::Failed {
                code: UNAVAILABLE,
                reason: "the history stream stopped (the server is shutting down)".into(),
            }),
        }
    }
}

/// Where a stream reads.
#[derive(Debug)]
pub struct Source {
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
    async fn read(&self, bottom: u64, top: u64) -> Result<Vec<Arc<Block>>, String> {
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

/// Where a history stream starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// At the start of this block (`fromBlock`).
    Block(u64),
    /// After event `index` of block `block`, whose hash has this `tag`
    /// (a cursor).
    After { block: u64, index: u32, tag: u64 },
}

/// Starts reading the chain's blocks from `from`, from `source`'s nodes
/// (or archive), until its log holds the rest; stops when the feed is
/// dropped.
pub fn start(source: Source, from: StartAt, admitted: Admitted) -> HistoryFeed {
    feed(from, admitted, |block, first, out, stop| {
        reader::read(source, block, first, out, stop)
    })
}

/// Starts reading the chain's blocks from `from`, from its stream on the
/// bus (an edge's), until `log` holds the rest; stops when the feed is
/// dropped.
pub fn start_on_bus(
    stream: ChainLog,
    log: Arc<EventLog>,
    from: StartAt,
    admitted: Admitted,
) -> HistoryFeed {
    feed(from, admitted, |block, first, out, stop| {
        stream::read(stream, log, block, first, out, stop)
    })
}

/// A feed whose reader, made by `reading` (from the first block, the tag
/// it must have, the queue and the stop), runs on a task of its own.
fn feed<R, F>(from: StartAt, admitted: Admitted, reading: R) -> HistoryFeed
where
    R: FnOnce(u64, Option<u64>, mpsc::Sender<HistoryItem>, CancellationToken) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let (out, items) = mpsc::channel(2 * CHUNK as usize);
    let stop = CancellationToken::new();
    let (block, after, first) = match from {
        StartAt::Block(block) => (block, None, None),
        StartAt::After { block, index, tag } => (block, Some(index), Some(tag)),
    };
    tokio::spawn(reading(block, first, out, stop.clone()));
    HistoryFeed {
        after,
        items,
        _reader: stop.drop_guard(),
        _admitted: admitted,
        meter: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A metered feed counts each block it hands over, once, in its
    /// subscriber's key's usage; nothing else it hands over counts.
    #[tokio::test]
    async fn a_metered_feed_counts_the_blocks_it_hands_over() {
        let plans =
            chainsieve_keys::plan::Plans::from_config(&chainsieve_config::Config::default());
        let admitted = limits::Streams::new(1)
            .admit(&"key".into(), plans.default_plan())
            .expect("a place");
        let meter = Arc::new(Meter::default());
        let mut feed = feed(StartAt::Block(1), admitted, |_, _, out, _| async move {
            let mut parent = B256::ZERO;
            for number in 1..=3 {
                let block = Arc::new(Block::fixture(number, 1, parent, &[]));
                parent = block.hash;
                let _ = out.send(HistoryItem::Block(block)).await;
            }
            let _ = out
                .send(HistoryItem::Failed {
                    code: GONE,
                    reason: "the chain moved".into(),
                })
                .await;
        })
        .metered(Some(meter.clone()));
        let mut handed = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), async {
            while handed.len() < 4 {
                match feed.try_next() {
                    Some(item) => handed.push(item),
                    None => tokio::task::yield_now().await,
                }
            }
        })
        .await
        .expect("the reader's items in time");
        assert!(matches!(handed[3], HistoryItem::Failed { .. }));
        assert_eq!(meter.totals().history_blocks, 3);
    }
}
