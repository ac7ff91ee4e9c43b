//! What a call runs with: who is calling, over what, and the parts of the
//! server a method may use; and what a call gives back.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;

use super::RpcError;
use super::rate_limit::RateLimit;
use super::subscriptions::{OwnedIds, Subscriptions};
use chainsieve_chain::Chain;
use chainsieve_config::LimitsConfig;
use chainsieve_fanout::{SendError, Sink};
use chainsieve_filters::actor::Gate;
use chainsieve_history::limits::Streams;
use chainsieve_keys::Key;
use chainsieve_watchlists::Watchlists;
use chainsieve_webhook::Webhooks;

/// A WebSocket connection as the methods see it.
#[derive(Debug)]
pub struct Connection {
    pub sink: Sink,
    /// The subscriptions this connection made, cancelled when it closes;
    /// shared with the registry so a cancel over HTTP updates it too.
    pub owned: Arc<OwnedIds>,
}

impl Connection {
    pub fn new(sink: Sink) -> Self {
        Self {
            sink,
            owned: Arc::default(),
        }
    }

    pub(super) fn owned(&self) -> std::sync::MutexGuard<'_, HashSet<Arc<str>>> {
        self.owned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes every subscription id the connection still owns.
    pub fn take_owned(&self) -> Vec<Arc<str>> {
        self.owned().drain().collect()
    }
}

/// Who is calling, over what, and the server's parts a call may use.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    pub chain: &'a Arc<Chain>,
    /// Every chain served, for what concerns them all (where a watchlist
    /// edit applies on each).
    pub chains: &'a BTreeMap<String, Arc<Chain>>,
    /// The caller's key; its plan is read at every call (it may change).
    pub key: &'a Arc<Key>,
    /// `None` over HTTP.
    pub connection: Option<&'a Connection>,
    pub subscriptions: &'a Subscriptions,
    /// History streams running on the server.
    pub history_streams: &'a Arc<Streams>,
    pub rate: &'a RateLimit,
    pub limits: &'a LimitsConfig,
    /// The server's webhooks; `None` where this role serves none.
    pub webhooks: Option<&'a Arc<Webhooks>>,
    /// Every key's watchlists; `None` where this role keeps none.
    pub watchlists: Option<&'a Arc<Watchlists>>,
}

/// Gates of the subscriptions one batch makes: they deliver only once the
/// batch's response, which tells the client their ids, is queued. One per
/// batch, so batches answered side by side on one connection each open
/// only their own.
#[derive(Debug, Default)]
pub(super) struct Gates(Mutex<Vec<Arc<Gate>>>);

impl Gates {
    /// A new closed gate, opened with the others by [`Reply::queue`].
    pub(super) fn add(&self) -> Arc<Gate> {
        let gate = Gate::closed();
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(gate.clone());
        gate
    }

    fn open(self) {
        let gates = self
            .0
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for gate in gates {
            gate.open();
        }
    }
}

/// What one body or frame gets back.
#[derive(Debug)]
pub struct Reply {
    /// The response; `None` when nothing is to be sent (notifications, or
    /// a single `eth_subscribe` whose response the filter actor queued).
    pub response: Option<String>,
    /// Subscriptions made in a batch, waiting for `response`.
    gates: Gates,
}

impl Reply {
    pub(super) fn new(response: Option<String>, gates: Gates) -> Self {
        Self { response, gates }
    }

    /// Queues the response on a connection, then lets the subscriptions
    /// the batch made deliver, behind it.
    pub fn queue(self, sink: &Sink) -> Result<(), SendError> {
        let queued = self.response.map_or(Ok(()), |response| sink.send(response));
        self.gates.open();
        queued
    }
}

/// The result of one call.
pub(super) enum Outcome {
    Reply(Result<Box<RawValue>, RpcError>),
    /// The response was already queued (by the filter actor, so it precedes
    /// the first notification).
    Sent,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two batches answered side by side on one connection: queuing one
    /// opens its own subscriptions' gates, after its response, and leaves
    /// the other's closed until its response is queued.
    #[test]
    fn a_reply_opens_only_its_own_batch_gates() {
        let (sink, mut frames) = Sink::new(8);
        let (first, second) = (Gates::default(), Gates::default());
        let first_gate = first.add();
        let second_gate = second.add();
        let (first, second) = (
            Reply::new(Some("[first]".into()), first),
            Reply::new(Some("[second]".into()), second),
        );
        second.queue(&sink).expect("room in the queue");
        assert!(second_gate.is_open());
        assert!(!first_gate.is_open());
        assert_eq!(
            frames.try_recv().expect("queued").to_text(),
            "[second]",
            "the response is queued before its subscriptions deliver"
        );
        first.queue(&sink).expect("room in the queue");
        assert!(first_gate.is_open());
    }

    /// A reply with nothing to send (the request was a notification)
    /// queues nothing.
    #[test]
    fn an_empty_reply_queues_nothing() {
        let (sink, mut frames) = Sink::new(8);
        Reply::new(None, Gates::default())
            .queue(&sink)
            .expect("nothing to queue");
        assert!(frames.try_recv().is_none());
    }
}
