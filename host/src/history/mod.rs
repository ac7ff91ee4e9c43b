//! History from the nodes (docs/src/api.md, History from the nodes): a
//! `fromBlock` older than the chain's log window is served by reading the
//! canonical blocks from the chain's nodes, oldest first, until the log
//! holds the rest. A task per stream ([`reader`]) reads them in batches,
//! verified and linked by parent hash, into a bounded queue the
//! subscription's filter actor drains as fast as its reader reads: the
//! stream goes at the subscriber's pace, and the queue lets the next batch
//! be read while the last one is delivered.

pub mod limits;
mod reader;

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::eventlog::EventLog;
use crate::eventlog::cursor::Plan;
use crate::model::Block;
use crate::node::NodePool;
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
}

impl HistoryFeed {
    /// The next item if one is ready; `None` while the reader is at work.
    /// A reader that stopped without a word fails the stream.
    pub fn try_next(&mut self) -> Option<HistoryItem> {
        match self.items.try_recv() {
            Ok(item) => Some(item),
            Err(mpsc::error::TryRecvError::Empty) => None,
            Err(mpsc::error::TryRecvError::Disconnected) => Some(HistoryItem::Failed {
                code: UNAVAILABLE,
                reason: "the history stream stopped (the server is shutting down)".into(),
            }),
        }
    }
}

/// Where a stream reads, and what it may take.
#[derive(Debug)]
pub struct Source {
    pub pool: Arc<NodePool>,
    pub log: Arc<EventLog>,
    /// The chain's calls a second, shared by its streams.
    pub budget: Arc<Budget>,
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

/// Starts reading the chain's blocks from `from`, from `source`'s nodes,
/// until its log holds the rest; stops when the feed is dropped.
pub fn start(source: Source, from: StartAt, admitted: Admitted) -> HistoryFeed {
    let (out, items) = mpsc::channel(2 * CHUNK as usize);
    let stop = CancellationToken::new();
    let (block, after, first) = match from {
        StartAt::Block(block) => (block, None, None),
        StartAt::After { block, index, tag } => (block, Some(index), Some(tag)),
    };
    tokio::spawn(reader::read(source, block, first, out, stop.clone()));
    HistoryFeed {
        after,
        items,
        _reader: stop.drop_guard(),
        _admitted: admitted,
    }
}
