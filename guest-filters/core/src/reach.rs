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
