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
//! - [`TxRead`], [`LogRead`]: what rules read of an event, in either
//!   layout, so one filter's rules serve every contract version;
//! - [`RuleSet`]: the subscriptions of a rule-per-subscription filter,
//!   filed by address; [`PayloadChoice`]: what a rule set's `subscribe`
//!   answers;
//! - [`Emit`]: where rules send an event's subscriptions;
//! - [`Reach`]: which events a subscription can match, so the host asks a
//!   0.2 component about those alone;
//! - [`Matches`]: what a component answers, in columnar form;
//! - [`component`]: what a 0.2-and-later component's filter is made of
//!   (manifest, event views, where matches go), each SDK adding its
//!   version's bindings.

pub mod component;
pub mod keys;
pub mod layout;
pub mod params;
pub mod projection;
pub mod reach;
pub mod read;
pub mod rules;

use std::hash::Hash;

pub use keys::{KeyMap, KeySet};
pub use layout::{Batch, HeadView, LayoutError, LogView, Source, TxView};
pub use params::ParamsError;
pub use reach::{Key, MembershipWalk, Memberships, Reach, WatchedField};
pub use read::{LogRead, TxHashRead, TxRead};
pub use rules::RuleSet;
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
    /// A mined transaction's receipt in `eth_getTransactionReceipt`'s
    /// shape, in an array as geth's `transactionReceipts` sends receipts
    /// (contract 0.3).
    Receipt,
}

impl Payload {
    /// Whether the events of `source` have this payload: only a mined
    /// transaction has a receipt, and a lifecycle turn has no
    /// BlockVision shape.
    pub const fn fits(self, source: Source) -> bool {
        match self {
            Payload::Receipt => matches!(source, Source::MinedTransactions),
            Payload::FullBlockvision => !matches!(source, Source::Lifecycle),
            Payload::Hash | Payload::Full => true,
        }
    }
}

/// What a subscription's notifications carry, under any contract version;
/// mirrors the 0.2 WIT `payload` (0.1 has kinds only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// A payload the host makes from the event.
    Kind(Payload),
    /// A payload the component writes for each match (contract 0.2).
    Written,
}

/// What a rule set's `subscribe` answers, for the SDKs' `rules_filter!`:
/// `()` when every subscription gets the manifest's payload kind, or the
/// [`Payload`] the subscription's parameters chose (`newPendingTransactions`
/// with `true` gets full transactions).
pub trait PayloadChoice {
    /// The kind a subscription gets, given the manifest's.
    fn or_manifest(self, manifest: Payload) -> Payload;
}

impl PayloadChoice for () {
    fn or_manifest(self, manifest: Payload) -> Payload {
        manifest
    }
}

impl PayloadChoice for Payload {
    fn or_manifest(self, _manifest: Payload) -> Payload {
        self
    }
}

/// Where rules send the subscriptions an event goes to: one at a time, or
/// a whole list at once. Any `FnMut(SubscriptionId)` is one; the 0.2 SDK's
/// `Out` takes a list in one copy, which is what makes a broadcast's answer
/// cheap.
pub trait Emit {
    fn emit(&mut self, id: SubscriptionId);

    /// Sends the event to every subscription of `ids`.
    fn emit_all(&mut self, ids: &[SubscriptionId]) {
        ids.iter().for_each(|&id| self.emit(id));
    }
}

impl<F: FnMut(SubscriptionId)> Emit for F {
    #[inline(always)]
    fn emit(&mut self, id: SubscriptionId) {
        self(id)
    }
}

/// A pair's payload index when the component wrote none for it: the
/// subscription gets its payload kind.
pub const NO_PAYLOAD: u32 = u32::MAX;

/// Matches in columnar form, as the WIT `matches` record carries them: pair
/// `i` sends event `events[i]` to `subscriptions[i]`. Under contract 0.2 a
/// pair may name a payload the component wrote (`payloads[i]`); pairs that
/// name the same one share it, so it crosses the boundary and is checked
/// once. Under 0.1, and whenever nothing was written, the payload lists are
/// empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Matches {
    pub events: Vec<u32>,
    pub subscriptions: Vec<SubscriptionId>,
    /// Per pair, the index of its written payload, or [`NO_PAYLOAD`];
    /// empty when no pair has one.
    pub payloads: Vec<u32>,
    /// The written payloads, JSON texts end to end.
    pub payload_bytes: Vec<u8>,
    /// Where each written payload ends in `payload_bytes`.
    pub payload_ends: Vec<u32>,
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

    /// Sends `event` to `id` with the subscription's payload kind.
    pub fn push(&mut self, event: u32, id: SubscriptionId) {
        self.events.push(event);
        self.subscriptions.push(id);
        if !self.payloads.is_empty() {
            self.payloads.push(NO_PAYLOAD);
        }
    }

    /// Keeps a written payload (one JSON value); pairs name it by the index
    /// returned.
    pub fn write_payload(&mut self, json: &[u8]) -> u32 {
        self.payload_bytes.extend_from_slice(json);
        self.payload_ends.push(self.payload_bytes.len() as u32);
        self.payload_ends.len() as u32 - 1
    }

    /// Sends `event` to every subscription of `ids` with its payload kind,
    /// in one copy.
    pub fn push_all(&mut self, event: u32, ids: &[SubscriptionId]) {
        self.events.resize(self.events.len() + ids.len(), event);
        self.subscriptions.extend_from_slice(ids);
        if !self.payloads.is_empty() {
            self.payloads.resize(self.events.len(), NO_PAYLOAD);
        }
    }

    /// Sends `event` to `id` with written payload `payload`.
    pub fn push_written(&mut self, event: u32, id: SubscriptionId, payload: u32) {
        self.payloads.resize(self.events.len(), NO_PAYLOAD);
        self.events.push(event);
        self.subscriptions.push(id);
        self.payloads.push(payload);
    }

    /// Keeps the pairs whose subscription `keep` says to keep, in order.
    pub fn retain_subscriptions(&mut self, mut keep: impl FnMut(SubscriptionId) -> bool) {
        let mut kept = 0;
        for pair in 0..self.len() {
            if keep(self.subscriptions[pair]) {
                self.events[kept] = self.events[pair];
                self.subscriptions[kept] = self.subscriptions[pair];
                if let Some(payload) = self.payloads.get(pair).copied() {
                    self.payloads[kept] = payload;
                }
                kept += 1;
            }
        }
        self.events.truncate(kept);
        self.subscriptions.truncate(kept);
        self.payloads.truncate(kept);
    }

    /// The payload index pair `pair` names, if it names one.
    pub fn payload_of(&self, pair: usize) -> Option<u32> {
        self.payloads
            .get(pair)
            .copied()
            .filter(|&index| index != NO_PAYLOAD)
    }

    /// Written payload `index`; `None` if there is no such payload or the
    /// ends are out of order (a component's bad answer).
    pub fn written(&self, index: u32) -> Option<&[u8]> {
        let index = index as usize;
        let end = *self.payload_ends.get(index)? as usize;
        let start = match index {
            0 => 0,
            _ => self.payload_ends[index - 1] as usize,
        };
        self.payload_bytes.get(start..end)
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

    /// Emits every subscription, in subscription order, as one list.
    #[inline(always)]
    pub fn emit_all(&self, emit: &mut impl Emit) {
        emit.emit_all(&self.ids);
    }

    pub fn ids(&self) -> &[SubscriptionId] {
        &self.ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs with and without a written payload, and two subscribers
    /// sharing one: each pair names the right payload, once written.
    #[test]
    fn pairs_name_their_written_payloads() {
        let mut matches = Matches::default();
        matches.push(0, 10);
        let transfer = matches.write_payload(br#"{"amount":"1"}"#);
        matches.push_written(1, 11, transfer);
        matches.push_written(1, 12, transfer);
        matches.push(2, 10);
        assert_eq!(matches.len(), 4);
        assert_eq!(matches.payloads, [NO_PAYLOAD, 0, 0, NO_PAYLOAD]);
        assert_eq!(
            (0..4)
                .map(|pair| matches.payload_of(pair))
                .collect::<Vec<_>>(),
            [None, Some(0), Some(0), None]
        );
        assert_eq!(matches.written(transfer), Some(&br#"{"amount":"1"}"#[..]));
        assert_eq!(matches.written(1), None);
    }

    /// A list sent at once lines up as the same pairs sent one at a time,
    /// before and after a written payload, through `Emit` either way.
    #[test]
    fn a_list_sent_at_once_is_the_pairs_one_at_a_time() {
        let mut one_by_one = Matches::default();
        let mut at_once = Matches::default();
        let ids = [4, 5, 6];
        let push = |m: &mut Matches, event: u32| {
            let mut each = |id| m.push(event, id);
            ids.iter().for_each(|&id| Emit::emit(&mut each, id));
        };
        push(&mut one_by_one, 0);
        at_once.push_all(0, &ids);
        assert_eq!(at_once, one_by_one);
        for m in [&mut one_by_one, &mut at_once] {
            let payload = m.write_payload(b"1");
            m.push_written(1, 9, payload);
        }
        push(&mut one_by_one, 2);
        at_once.push_all(2, &ids);
        assert_eq!(at_once, one_by_one);
        assert_eq!(
            at_once.payloads,
            [
                NO_PAYLOAD, NO_PAYLOAD, NO_PAYLOAD, 0, NO_PAYLOAD, NO_PAYLOAD, NO_PAYLOAD
            ]
        );
    }

    /// Dropping pairs keeps the rest in order, with their payloads.
    #[test]
    fn retained_pairs_keep_their_payloads() {
        let mut matches = Matches::default();
        matches.push(0, 1);
        let payload = matches.write_payload(b"2");
        matches.push_written(1, 2, payload);
        matches.push(2, 1);
        matches.push_written(3, 3, payload);
        matches.retain_subscriptions(|id| id != 1);
        assert_eq!(matches.pairs().collect::<Vec<_>>(), [(1, 2), (3, 3)]);
        assert_eq!(matches.payloads, [0, 0]);
        let mut plain = Matches::default();
        plain.push(0, 1);
        plain.push(0, 2);
        plain.retain_subscriptions(|id| id == 2);
        assert_eq!(plain.pairs().collect::<Vec<_>>(), [(0, 2)]);
        assert!(plain.payloads.is_empty());
    }

    /// Out-of-order ends (a component's bad answer) read as no payload.
    #[test]
    fn bad_ends_read_as_nothing() {
        let matches = Matches {
            payload_bytes: b"[1][2]".to_vec(),
            payload_ends: vec![3, 2],
            ..Matches::default()
        };
        assert_eq!(matches.written(0), Some(&b"[1]"[..]));
        assert_eq!(matches.written(1), None);
    }
}
