//! What a call runs with: who is calling, over what, and the parts of the
//! server a method may use; and what a call gives back.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;

use super::RpcError;
use super::rate_limit::RateLimit;
use super::subscriptions::{OwnedIds, Subscriptions};
use crate::chain::Chain;
use crate::config::LimitsConfig;
use crate::fanout::Sink;

/// A WebSocket connection as the methods see it.
#[derive(Debug)]
pub struct Connection {
    pub sink: Sink,
    /// The subscriptions this connection made, cancelled when it closes;
    /// shared with the registry so a cancel over HTTP updates it too.
    pub owned: Arc<OwnedIds>,
    /// Gates of subscriptions made in the batch being answered; opened by
    /// [`Connection::open_gates`] once its response is queued. Touched only
    /// by the connection's reader.
    pub(super) gates: Mutex<Vec<Arc<AtomicBool>>>,
}

impl Connection {
    pub fn new(sink: Sink) -> Self {
        Self {
            sink,
            owned: Arc::default(),
            gates: Mutex::default(),
        }
    }

    /// Lets subscriptions made in the last batch deliver: its response,
    /// with their ids, is now queued ahead of their notifications.
    pub fn open_gates(&self) {
        let gates = std::mem::take(
            &mut *self
                .gates
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for gate in gates {
            gate.store(true, Ordering::Release);
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
    pub api_key: &'a Arc<str>,
    /// `None` over HTTP.
    pub connection: Option<&'a Connection>,
    pub subscriptions: &'a Subscriptions,
    pub rate: &'a RateLimit,
    pub limits: &'a LimitsConfig,
}

/// The result of one call.
pub(super) enum Outcome {
    Reply(Result<Box<RawValue>, RpcError>),
    /// The response was already queued (by the filter actor, so it precedes
    /// the first notification).
    Sent,
}
