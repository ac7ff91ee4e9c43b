//! A log step as one bus message: a format byte, then the step's change in
//! MessagePack (docs/architecture.md, The bus). Encoded once by the ingest
//! that appended the step, whatever the number of edges reading it; its
//! position is the message's stream sequence and travels in no payload.
//!
//! MessagePack because it is self-describing: the model's serde form (the
//! one a persisted log stores, with alloy's flattened and optional fields)
//! round-trips unchanged, while hashes, addresses and quantities go as raw
//! bytes rather than hex text.

use thiserror::Error;

use crate::ingest::ChainEvent;

/// The first byte of every message: the encoding after it. A reader
/// refuses a message of a format it does not know rather than guessing.
const FORMAT: u8 = 1;

#[derive(Debug, Error)]
pub enum DecodeError {
    #[error("an empty message")]
    Empty,
    #[error("a message of format {0}; this server reads format {FORMAT}")]
    Format(u8),
    #[error("a malformed step: {0}")]
    Malformed(#[from] rmp_serde::decode::Error),
}

/// The bytes a step's `change` travels as.
pub fn encode(change: &ChainEvent) -> Vec<u8> {
    let mut bytes = vec![FORMAT];
    // Writing into a Vec fails only for a type serde cannot represent,
    // which the model's derives rule out (the round-trip test covers each
    // kind of change).
    rmp_serde::encode::write_named(&mut bytes, change)
        .expect("a chain change is always representable in MessagePack");
    bytes
}

/// The change a message carries.
pub fn decode(bytes: &[u8]) -> Result<ChainEvent, DecodeError> {
    match bytes.split_first() {
        None => Err(DecodeError::Empty),
        Some((&FORMAT, rest)) => Ok(rmp_serde::from_slice(rest)?),
        Some((&other, _)) => Err(DecodeError::Format(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::SourceEvent;
    use crate::ingest::devnet::{Devnet, DevnetSettings};

    fn changes() -> Vec<ChainEvent> {
        let mut devnet = Devnet::new(1, &DevnetSettings::default());
        let mut changes = vec![ChainEvent::Added(devnet.genesis())];
        for event in std::iter::repeat_with(|| devnet.next_step())
            .flatten()
            .take(12)
        {
            match event {
                SourceEvent::Block(block) => {
                    changes.push(ChainEvent::Removed(block.clone()));
                    changes.push(ChainEvent::Added(block));
                }
                SourceEvent::Pending(txs) => changes.push(ChainEvent::Pending(txs)),
                SourceEvent::Synced | SourceEvent::Logged { .. } => {}
            }
        }
        changes
    }

    /// Every kind of change comes back as it went, each block's logs and
    /// transactions (the payloads the edges serialize) byte for byte; and
    /// the message is smaller than the change's JSON.
    #[test]
    fn changes_round_trip_smaller_than_json() {
        let changes = changes();
        assert!(
            changes
                .iter()
                .any(|c| matches!(c, ChainEvent::Pending(t) if !t.is_empty()))
        );
        for change in &changes {
            let bytes = encode(change);
            let back = decode(&bytes).expect("decodes");
            assert_eq!(
                serde_json::to_string(&back).expect("json"),
                serde_json::to_string(change).expect("json")
            );
            if let (ChainEvent::Added(a), ChainEvent::Added(b)) = (change, &back) {
                assert!(!a.logs.is_empty() || a.transactions.is_empty());
                for index in 0..a.logs.len() {
                    assert_eq!(a.log_json(index, false), b.log_json(index, false));
                }
                assert_eq!(a.header_json(), b.header_json());
            }
            let json = serde_json::to_vec(change).expect("json").len();
            assert!(
                bytes.len() < json,
                "{} bytes vs {json} as JSON",
                bytes.len()
            );
        }
    }

    #[test]
    fn unknown_formats_and_garbage_are_refused() {
        assert!(matches!(decode(&[]), Err(DecodeError::Empty)));
        let mut bytes = encode(&changes()[0]);
        bytes[0] = 9;
        assert!(matches!(decode(&bytes), Err(DecodeError::Format(9))));
        assert!(matches!(
            decode(&[FORMAT, 0xc1]),
            Err(DecodeError::Malformed(_))
        ));
        bytes[0] = FORMAT;
        bytes.truncate(bytes.len() / 2);
        assert!(matches!(decode(&bytes), Err(DecodeError::Malformed(_))));
    }
}
