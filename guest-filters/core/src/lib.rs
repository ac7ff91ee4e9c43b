//! What every version of the chainsieve filter contract shares, for the
//! guest SDKs (one crate per contract version: `chainsieve-filter-sdk` for
//! 0.1.0) and for the host, which writes batches with [`layout`]:
//!
//! - [`layout`]: the packed batch format and its views ([`TxView`],
//!   [`HeadView`], [`LogView`]); [`projection`], layout 2, carrying only
//!   the fields a 0.2.0 component declares;
//! - [`params`]: parsing helpers whose errors read well as JSON-RPC messages;
//! - [`SubscriptionIndex`], [`Broadcast`], [`KeyMap`]: the building blocks of
//!   indexed matching;
//! - [`Matches`]: what a component answers, in columnar form.

pub mod keys;
pub mod layout;
pub mod params;
pub mod projection;

use std::hash::Hash;

pub use keys::{KeyMap, KeySet};
pub use layout::{Batch, HeadView, LayoutError, LogView, Source, TxView};
pub use params::ParamsError;
/// Re-exported so filters parse their parameters with the same JSON crate.
pub use serde_json;

/// The host's handle for one subscription; opaque to the filter.
pub type SubscriptionId = u64;

/// What a matching subscriber receives; mirrors the WIT `payload` enum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Payload {
    /// The transaction or block hash.
    Hash,
    /// The full object, in geth's shape.
    Full,
    /// The full object, in BlockVision's shape (pending block fields `""`).
    FullBlockvision,
}

/// An event type a filter can consume: a view over one record of a batch.
pub trait Event<'a>: Sized {
    /// Reads every event of a batch of this kind.
    fn all(batch: &Batch<'a>) -> Result<impl Iterator<Item = Self> + 'a, LayoutError>;
}

impl<'a> Event<'a> for TxView<'a> {
    fn all(batch: &Batch<'a>) -> Result<impl Iterator<Item = Self> + 'a, LayoutError> {
        batch.transactions()
    }
}

impl<'a> Event<'a> for HeadView<'a> {
    fn all(batch: &Batch<'a>) -> Result<impl Iterator<Item = Self> + 'a, LayoutError> {
        batch.heads()
    }
}

impl<'a> Event<'a> for LogView<'a> {
    fn all(batch: &Batch<'a>) -> Result<impl Iterator<Item = Self> + 'a, LayoutError> {
        batch.logs()
    }
}

/// Matches in columnar form, as the WIT `matches` record carries them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Matches {
    pub events: Vec<u32>,
    pub subscriptions: Vec<SubscriptionId>,
}

impl Matches {
    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The pairs as (event index, subscription id).
    pub fn pairs(&self) -> impl Iterator<Item = (u32, SubscriptionId)> + '_ {
        self.events
            .iter()
            .copied()
            .zip(self.subscriptions.iter().copied())
    }
}

/// Key → subscriptions, for filters that match an event by looking up one of
/// its fields (an address, a topic, a selector) instead of testing every
/// subscription.
#[derive(Debug)]
pub struct SubscriptionIndex<K> {
    map: KeyMap<K, Vec<SubscriptionId>>,
}

impl<K> Default for SubscriptionIndex<K> {
    fn default() -> Self {
        Self {
            map: KeyMap::default(),
        }
    }
}

impl<K: Hash + Eq> SubscriptionIndex<K> {
    pub fn insert(&mut self, key: K, id: SubscriptionId) {
        let ids = self.map.entry(key).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }

    pub fn remove(&mut self, key: &K, id: SubscriptionId) {
        if let Some(ids) = self.map.get_mut(key) {
            ids.retain(|&other| other != id);
            if ids.is_empty() {
                self.map.remove(key);
            }
        }
    }

    /// The subscriptions filed under `key`.
    #[inline(always)]
    pub fn get(&self, key: &K) -> &[SubscriptionId] {
        // An empty index answers without hashing the key.
        if self.map.is_empty() {
            return &[];
        }
        self.map.get(key).map_or(&[], Vec::as_slice)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Subscriptions that receive every event of their stream, for filters
/// with nothing to index (`newHeads`, `newPendingTransactions`).
#[derive(Debug, Default)]
pub struct Broadcast {
    ids: Vec<SubscriptionId>,
}

impl Broadcast {
    pub fn insert(&mut self, id: SubscriptionId) {
        if !self.ids.contains(&id) {
            self.ids.push(id);
        }
    }

    pub fn remove(&mut self, id: SubscriptionId) {
        self.ids.retain(|&other| other != id);
    }

    /// Emits every subscription, in subscription order.
    pub fn emit_all(&self, emit: &mut impl FnMut(SubscriptionId)) {
        self.ids.iter().for_each(|&id| emit(id));
    }

    pub fn ids(&self) -> &[SubscriptionId] {
        &self.ids
    }
}
