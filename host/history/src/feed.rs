//! What a history stream hands its subscription's actor ([`HistoryItem`])
//! through the actor's end of it ([`HistoryFeed`]), and the JSON-RPC codes
//! a stream fails with.

use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tokio_util::sync::DropGuard;

use chainsieve_eventlog::cursor::ReplayStart;
use chainsieve_model::Block;
use chainsieve_usage::Meter;

use crate::limits::Admitted;

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
    Seam(ReplayStart),
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
    /// An item [`Self::poll_ready`] took from `items` before
    /// [`Self::try_next`] asked.
    early: Option<HistoryItem>,
    /// Cancels the reader when the subscription ends.
    _reader: DropGuard,
    /// The stream's place among `[history] max_streams`, given back with
    /// the feed.
    _admitted: Admitted,
    /// Counts the blocks handed over, in the subscriber's key's usage.
    meter: Option<Arc<Meter>>,
}

impl HistoryFeed {
    /// The actor's end of a stream read into `items` by a reader that
    /// `reader` stops when the feed is dropped, holding its place among
    /// the streams (`admitted`).
    pub(crate) fn new(
        after: Option<u32>,
        items: mpsc::Receiver<HistoryItem>,
        reader: DropGuard,
        admitted: Admitted,
    ) -> Self {
        Self {
            after,
            items,
            early: None,
            _reader: reader,
            _admitted: admitted,
            meter: None,
        }
    }

    /// The feed, its blocks counted by `meter`.
    pub fn metered(self, meter: Option<Arc<Meter>>) -> Self {
        Self { meter, ..self }
    }

    /// Ready once [`Self::try_next`] has something to say: the next item,
    /// kept for it, or that the reader stopped. For an actor that waits on
    /// several streams at once.
    pub fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.early.is_some() {
            return Poll::Ready(());
        }
        match self.items.poll_recv(cx) {
            Poll::Ready(item) => {
                // `None`: the reader stopped; `try_next` says so.
                self.early = item;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// The next item if one is ready; `None` while the reader is at work.
    /// A reader that stopped without a word fails the stream.
    pub fn try_next(&mut self) -> Option<HistoryItem> {
        let next = match self.early.take() {
            Some(item) => Ok(item),
            None => self.items.try_recv(),
        };
        match next {
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

/// Where a history stream starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// At the start of this block (`fromBlock`).
    Block(u64),
    /// After event `index` of block `block`, whose hash has this `tag`
    /// (a cursor).
    After { block: u64, index: u32, tag: u64 },
}

impl StartAt {
    /// The block the stream reads first.
    pub fn block(&self) -> u64 {
        match self {
            StartAt::Block(block) | StartAt::After { block, .. } => *block,
        }
    }
}
