//! Which events a subscription can match, as a contract 0.2 component tells
//! the host when it accepts the subscription. The host then asks the
//! component about the events some subscription can match and no others,
//! and delivers to a subscription that takes every event without asking
//! (docs/src/architecture.md, Reach). A reach must never leave out an event
//! the component would match: the host does not ask about it.

use crate::Source;
use crate::projection::{log_fields, tx_fields};

/// A field value an event must carry for a subscription to match it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// A transaction's sender.
    Sender([u8; 20]),
    /// A transaction's receiver (a contract creation has none).
    Receiver([u8; 20]),
    /// A transaction's method selector (the first four bytes of its input).
    Selector([u8; 4]),
    /// The contract that emitted a log.
    Emitter([u8; 20]),
    /// A log's topic at a position (0–3).
    Topic(u8, [u8; 32]),
    /// An address of watchlist `u32` in the field (contract 0.3; the host
    /// looks the field's address up in its watchlists).
    Watched(WatchedField, u32),
}

/// A field whose address the host looks up in watchlists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum WatchedField {
    Sender,
    Receiver,
    Emitter,
    /// A log's topic at a position (0–3) holding an address: its low 20
    /// bytes, the high 12 zero.
    Topic(u8),
}

impl WatchedField {
    /// The field's projection bit, in the stream kind it belongs to.
    pub const fn field(self) -> (Source, u32) {
        match self {
            WatchedField::Sender => (Source::MinedTransactions, tx_fields::FROM),
            WatchedField::Receiver => (Source::MinedTransactions, tx_fields::TO),
            WatchedField::Emitter => (Source::Logs, log_fields::ADDRESS),
            WatchedField::Topic(_) => (Source::Logs, log_fields::TOPICS),
        }
    }
}

/// Which of a batch's events carry an address of a watchlist some
/// subscription reaches, in event order: each entry is an event's index,
/// the field, and the watchlist (contract 0.3's `memberships`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memberships {
    entries: Vec<(u32, WatchedField, u32)>,
}

impl Memberships {
    /// Adds that event `event`'s `field` is in `watchlist`; events come in
    /// order.
    pub fn push(&mut self, event: u32, field: WatchedField, watchlist: u32) {
        debug_assert!(self.entries.last().is_none_or(|(last, ..)| *last <= event));
        self.entries.push((event, field, watchlist));
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every entry: (event, field, watchlist), in event order.
    pub fn entries(&self) -> &[(u32, WatchedField, u32)] {
        &self.entries
    }

    /// The memberships of each event in turn, for a walk over a batch.
    pub fn walk(&self) -> MembershipWalk<'_> {
        MembershipWalk {
            rest: &self.entries,
        }
    }
}

/// Hands out each event's memberships, events asked in rising order.
#[derive(Debug)]
pub struct MembershipWalk<'a> {
    rest: &'a [(u32, WatchedField, u32)],
}

impl<'a> MembershipWalk<'a> {
    /// The memberships of event `event` (none for most): (field,
    /// watchlist) pairs, as entries.
    pub fn of(&mut self, event: u32) -> &'a [(u32, WatchedField, u32)] {
        let skip = self.rest.iter().take_while(|(e, ..)| *e < event).count();
        self.rest = &self.rest[skip..];
        let here = self.rest.iter().take_while(|(e, ..)| *e == event).count();
        let (now, rest) = self.rest.split_at(here);
        self.rest = rest;
        now
    }
}

impl Key {
    /// The field a key is read from, as a projection bit of the stream
    /// kind it belongs to (`Source::MinedTransactions` stands for both
    /// transaction streams).
    pub const fn field(&self) -> (Source, u32) {
        match self {
            Key::Sender(_) => (Source::MinedTransactions, tx_fields::FROM),
            Key::Receiver(_) => (Source::MinedTransactions, tx_fields::TO),
            Key::Selector(_) => (Source::MinedTransactions, tx_fields::SELECTOR),
            Key::Emitter(_) => (Source::Logs, log_fields::ADDRESS),
            Key::Topic(..) => (Source::Logs, log_fields::TOPICS),
            Key::Watched(field, _) => field.field(),
        }
    }
}

/// What a subscription can match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Every event of the stream, with the subscription's payload kind:
    /// the host delivers them without asking the component.
    Every,
    /// Only events that carry at least one of these keys; the component is
    /// asked about those and decides.
    Keys(Vec<Key>),
    /// Any event: the component is asked about every one.
    Any,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A walk hands each event its own memberships, and none to the
    /// events between.
    #[test]
    fn a_walk_hands_out_each_events_memberships() {
        let mut memberships = Memberships::default();
        memberships.push(1, WatchedField::Sender, 7);
        memberships.push(1, WatchedField::Receiver, 8);
        memberships.push(4, WatchedField::Topic(2), 7);
        let mut walk = memberships.walk();
        assert!(walk.of(0).is_empty());
        assert_eq!(walk.of(1).len(), 2);
        assert!(walk.of(2).is_empty());
        assert_eq!(walk.of(4), &[(4, WatchedField::Topic(2), 7)]);
        assert!(walk.of(5).is_empty());
        assert_eq!(
            Key::Watched(WatchedField::Emitter, 3).field(),
            (Source::Logs, log_fields::ADDRESS)
        );
    }

    /// Each key is read from a field of its own stream kind.
    #[test]
    fn keys_name_their_fields() {
        assert_eq!(
            Key::Selector([0xa9, 0x05, 0x9c, 0xbb]).field(),
            (Source::MinedTransactions, tx_fields::SELECTOR)
        );
        assert_eq!(
            Key::Topic(2, [0; 32]).field(),
            (Source::Logs, log_fields::TOPICS)
        );
        assert!(
            Key::Sender([1; 20])
                .field()
                .0
                .same_kind(Source::PendingTransactions)
        );
    }
}
