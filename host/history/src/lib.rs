//! History from the nodes (docs/src/api.md, History from the nodes): a
//! `fromBlock` older than the chain's log window is served by reading the
//! canonical blocks from the chain's nodes (a devnet chain's [`archive`]),
//! oldest first, until the log holds the rest. A task per stream
//! ([`reader`]) reads them in batches,
//! verified and linked by parent hash, into a bounded queue the
//! subscription's filter actor drains as fast as its reader reads: the
//! stream goes at the subscriber's pace, and the queue lets the next batch
//! be read while the last one is delivered.
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_bus`],
//! [`chainsieve_eventlog`], [`chainsieve_keys`], [`chainsieve_model`],
//! [`chainsieve_node`], [`chainsieve_usage`].

pub mod archive;
mod blocks;
mod feed;
pub mod limits;
pub mod plan;
mod reader;
pub mod stream;

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use chainsieve_bus::ChainLog;
use chainsieve_eventlog::EventLog;
use limits::Admitted;

pub use blocks::{Blocks, Reading};
pub use feed::{GONE, HistoryFeed, HistoryItem, StartAt, UNAVAILABLE};
pub use reader::CHUNK;

/// Starts reading the chain's blocks from `from`, from `source`'s nodes
/// (or archive), until its log holds the rest; stops when the feed is
/// dropped.
pub fn start(source: Reading, from: StartAt, admitted: Admitted) -> HistoryFeed {
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
    HistoryFeed::new(after, items, stop.drop_guard(), admitted)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use alloy_primitives::B256;

    use chainsieve_model::Block;
    use chainsieve_usage::Meter;

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
