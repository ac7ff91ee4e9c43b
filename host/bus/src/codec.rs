//! A bus message: a format byte, then the value in MessagePack
//! (docs/src/architecture.md, The bus): a log step's change, or a price
//! journal's write. Encoded once by the ingest that made it, whatever the
//! number of servers reading it; its position is the message's stream
//! sequence and travels in no payload.
//!
//! MessagePack because it is self-describing: the model's serde form (the
//! one a persisted log stores, with alloy's flattened and optional fields)
//! round-trips unchanged, while hashes, addresses and quantities go as raw
//! bytes rather than hex text.

use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;

/// The first byte of every message: the encoding after it. A reader
/// refuses a message of a format it does not know rather than guessing.
const FORMAT: u8 = 1;

#[derive(Debug, Error)]
pub enum DecodeError {
    #[error("an empty message")]
    Empty,
    #[error("a message of format {0}; this server reads format {FORMAT}")]
    Format(u8),
    #[error("a malformed message: {0}")]
    Malformed(#[from] rmp_serde::decode::Error),
}

/// The bytes `value` travels as.
pub fn encode(value: &impl Serialize) -> Vec<u8> {
    let mut bytes = vec![FORMAT];
    // Writing into a Vec fails only for a type serde cannot represent,
    // which the derives of what the bus carries rule out (the round-trip
    // tests cover each kind of change and write).
    rmp_serde::encode::write_named(&mut bytes, value)
        .expect("what the bus carries is always representable in MessagePack");
    bytes
}

/// The value a message carries.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    match bytes.split_first() {
        None => Err(DecodeError::Empty),
        Some((&FORMAT, rest)) => Ok(rmp_serde::from_slice(rest)?),
        Some((&other, _)) => Err(DecodeError::Format(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chainsieve_ingest::devnet::{Devnet, DevnetSettings};
    use chainsieve_model::lifecycle::{BlockRef, Outcome, Stage, Turn, TxBrief};
    use chainsieve_model::{ChainEvent, SourceEvent};

    fn changes() -> Vec<ChainEvent> {
        let mut devnet = Devnet::new(1, &DevnetSettings::default());
        let mut changes = vec![ChainEvent::Added(devnet.genesis())];
        // Enough steps for every transaction type the devnet makes.
        for event in std::iter::repeat_with(|| devnet.next_step())
            .flatten()
            .take(200)
        {
            match event {
                SourceEvent::Block(block) => {
                    changes.push(ChainEvent::Removed(block.clone()));
                    changes.push(ChainEvent::Added(block));
                }
                SourceEvent::Pending { txs, .. } => changes.push(ChainEvent::Pending(txs)),
                SourceEvent::Synced
                | SourceEvent::Logged { .. }
                | SourceEvent::Finality { .. }
                | SourceEvent::Dropped(_) => {}
            }
        }
        // And a step of turns, of every stage.
        let block = changes
            .iter()
            .rev()
            .find_map(|c| match c {
                ChainEvent::Added(block) if !block.transactions.is_empty() => Some(block.clone()),
                _ => None,
            })
            .expect("a block with transactions");
        let at = BlockRef::of(&block);
        let turns = [
            Stage::Pending {
                seen_ms: 1_700_000_000_000,
                seen_by: Some("node-a".into()),
                reorged_out: Some(at),
            },
            Stage::Replaced {
                by: block.transactions[0].hash,
            },
            Stage::Dropped,
            Stage::Mined {
                block: at,
                index: 0,
                outcome: Outcome::of(&block, 0),
            },
            Stage::Safe {
                block: at,
                index: 0,
            },
            Stage::Finalized {
                block: at,
                index: 0,
            },
        ]
        .map(|stage| Turn {
            tx: TxBrief::of(&block.transactions[0]),
            stage,
        });
        changes.push(ChainEvent::Lifecycle(turns.into()));
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
        let types: std::collections::BTreeSet<u8> = changes
            .iter()
            .filter_map(|c| match c {
                ChainEvent::Added(block) => Some(block.transactions.iter().map(|tx| tx.tx_type)),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(types, (0..=4).collect(), "every type crosses the bus");
        for change in &changes {
            let bytes = encode(change);
            let back: ChainEvent = decode(&bytes).expect("decodes");
            assert_eq!(
                serde_json::to_string(&back).expect("json"),
                serde_json::to_string(change).expect("json")
            );
            if let (ChainEvent::Added(a), ChainEvent::Added(b)) = (change, &back) {
                for index in 0..a.logs.len() {
                    assert_eq!(a.log_json(index, false), b.log_json(index, false));
                }
                assert_eq!(a.header_json(), b.header_json());
                assert_eq!(
                    a.block_json(true).map(|j| j.get().to_string()),
                    b.block_json(true).map(|j| j.get().to_string())
                );
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
        let refused = |bytes: &[u8]| decode::<ChainEvent>(bytes).expect_err("refused");
        assert!(matches!(refused(&[]), DecodeError::Empty));
        let mut bytes = encode(&changes()[0]);
        bytes[0] = 9;
        assert!(matches!(refused(&bytes), DecodeError::Format(9)));
        assert!(matches!(
            refused(&[FORMAT, 0xc1]),
            DecodeError::Malformed(_)
        ));
        bytes[0] = FORMAT;
        bytes.truncate(bytes.len() / 2);
        assert!(matches!(refused(&bytes), DecodeError::Malformed(_)));
    }
}
