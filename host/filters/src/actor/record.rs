//! What the actor keeps of each subscription: where its notifications
//! come from now, and its history stream while it reads one.

use std::sync::Arc;
use std::task::{Context, Poll};

use chainsieve_eventlog::Position;
use chainsieve_eventlog::cursor::{AsOf, Mark};
use chainsieve_fanout::{self as fanout, Held, Notice, Sink, Via};
use chainsieve_history::HistoryFeed;
use chainsieve_model::{Block, Grade};

use super::gate::Gate;
use super::pairs::Pair;
use crate::batch::EventBatch;
use crate::contract::Delivery;

/// The JSON-RPC error code of the notification that ends a subscription
/// whose filter was removed or disabled.
pub(super) const ENDED: i64 = -32000;

/// What the actor keeps of a subscription: enough to deliver to it and to
/// make it again in a rebuilt or swapped instance.
pub(super) struct Record {
    pub(super) id: Arc<str>,
    pub(super) params: String,
    pub(super) delivery: Delivery,
    pub(super) sink: Sink,
    /// Closed until the session queued the batch response carrying the id.
    pub(super) gate: Option<Arc<Gate>>,
    pub(super) feed: Feed,
    /// The grade a block must reach before it is told of.
    pub(super) finality: Option<Grade>,
    /// For a `fromBlock` replay: the logged steps it passes over.
    pub(super) as_of: Option<AsOf>,
    /// Blocks older than the log, while [`Feed::History`]. Boxed: a
    /// reading carries a whole batch, and every live delivery looks records
    /// up, so a small one is a cache line or two.
    pub(super) history: Option<Box<Reading>>,
}

/// Where a subscription's notifications come from now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Feed {
    /// Live batches past this position (the ones up to it were replayed).
    Live { after: Position },
    /// The log, until the replay catches up; the next event due.
    Replaying { next: Mark },
    /// Blocks read from the nodes, older than the log, until the log holds
    /// the rest ([`Record::history`]).
    History,
}

impl Feed {
    /// Whether the subscription is in the replays' instance.
    pub(super) fn replays(self) -> bool {
        !matches!(self, Feed::Live { .. })
    }
}

impl Record {
    /// Sends the subscription's last frame: why it ended.
    pub(super) fn end(&self, message: &str) {
        self.end_with(ENDED, message);
    }

    pub(super) fn end_with(&self, code: i64, message: &str) {
        let _ = self.sink.send(fanout::ended(&self.id, code, message));
    }

    /// Whether its batch response has been queued (always, outside a batch).
    pub(super) fn announced(&self) -> bool {
        self.gate.as_ref().is_none_or(|gate| gate.is_open())
    }

    /// The notice of `pair`: the payload the component wrote for it, or
    /// else the subscription's kind.
    pub(super) fn notice<'a>(&self, batch: &'a EventBatch, pair: &'a Pair) -> Option<&'a Notice> {
        match (&pair.written, self.delivery) {
            (Some(written), _) => Some(written),
            (None, Delivery::Kind(kind)) => Some(batch.notice(pair.event as usize, kind)),
            // `contract::check_written` refuses such an answer.
            (None, Delivery::Written) => None,
        }
    }

    /// Sends the events of `pairs` (all of this subscription), back to
    /// back; how many were sent: all, or none if the connection is gone or
    /// overflowed.
    pub(super) fn notify_all<'a>(
        &self,
        batch: &EventBatch,
        pairs: impl Iterator<Item = &'a Pair> + Clone,
        via: Via,
    ) -> u64 {
        self.notify_or_hold(batch, pairs, via, None)
    }

    /// [`Self::notify_all`], or with `held` the same held for the step's
    /// one write (a new hold on the connection is pushed to `held`).
    pub(super) fn notify_or_hold<'a>(
        &self,
        batch: &EventBatch,
        pairs: impl Iterator<Item = &'a Pair> + Clone,
        via: Via,
        held: Option<&mut Vec<Held>>,
    ) -> u64 {
        let notices = pairs.filter_map(|pair| self.notice(batch, pair));
        let sent = match held {
            Some(held) => self.sink.hold_all(&self.id, notices, held),
            None => self.sink.notify_all(&self.id, notices, via),
        };
        sent.map_or(0, |sent| sent as u64)
    }
}

/// A subscription's history stream as the actor reads it.
#[derive(Debug)]
pub(super) struct Reading {
    pub(super) feed: HistoryFeed,
    /// The block being delivered: its batch, the subscription's pairs in
    /// chain order, and how many of them went.
    pub(super) current: Option<Current>,
}

#[derive(Debug)]
pub(super) struct Current {
    pub(super) block: Arc<Block>,
    pub(super) batch: EventBatch,
    pub(super) pairs: Vec<Pair>,
    pub(super) sent: usize,
}

impl Reading {
    pub(super) fn new(feed: HistoryFeed) -> Self {
        Self {
            feed,
            current: None,
        }
    }

    /// Ready once the reader has the next item for a stream that waits for
    /// it; pending while a block is being delivered (it waits on room or
    /// budget, not on the reader).
    pub(super) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.current {
            Some(_) => Poll::Pending,
            None => self.feed.poll_ready(cx),
        }
    }
}
