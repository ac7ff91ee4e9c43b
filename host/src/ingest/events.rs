//! What ingestion hands downstream: [`ChainEvent`]s in canonical order, and
//! the per-stream [`EventBatch`]es built from them. A batch is encoded for
//! the filter components once, and each event's notification payload is
//! serialized at most once per payload kind, however many topics and
//! subscribers it reaches.

use std::sync::{Arc, OnceLock};

use chainsieve_filter_sdk::layout::{BatchWriter, HeadFields, LogFields, TxFields};
use chainsieve_filter_sdk::{Payload, Source};

use super::model::{Block, Transaction, TxPosition};

/// A change to one chain, in the order subscribers must see it.
#[derive(Clone, Debug)]
pub enum ChainEvent {
    /// Transactions that entered the mempool.
    Pending(Vec<Arc<Transaction>>),
    /// A block joined the canonical chain.
    Added(Arc<Block>),
    /// A block left the canonical chain in a reorg (sent newest first,
    /// before the new branch's blocks).
    Removed(Arc<Block>),
}

/// One event of a stream, pointing into shared data.
#[derive(Clone, Debug)]
pub enum StreamEvent {
    Pending(Arc<Transaction>),
    Mined {
        block: Arc<Block>,
        index: usize,
        removed: bool,
    },
    Head(Arc<Block>),
    Log {
        block: Arc<Block>,
        index: usize,
        removed: bool,
    },
}

impl StreamEvent {
    /// Serializes the notification payload of `kind` for this event.
    fn payload_json(&self, kind: Payload) -> String {
        let quoted = |hash: &alloy_primitives::B256| format!("\"{hash}\"");
        match (self, kind) {
            (StreamEvent::Pending(tx), Payload::Hash) => quoted(&tx.hash),
            (StreamEvent::Pending(tx), Payload::Full) => tx.to_json(TxPosition::Pending, false),
            (StreamEvent::Pending(tx), Payload::FullBlockvision) => {
                tx.to_json(TxPosition::PendingBlockvision, false)
            }
            (StreamEvent::Mined { block, index, .. }, Payload::Hash) => {
                quoted(&block.transactions[*index].hash)
            }
            (
                StreamEvent::Mined {
                    block,
                    index,
                    removed,
                },
                _,
            ) => block.transaction_json(*index, *removed),
            (StreamEvent::Head(block), Payload::Hash) => quoted(&block.hash),
            (StreamEvent::Head(block), _) => block.header_json(),
            (StreamEvent::Log { block, index, .. }, Payload::Hash) => {
                quoted(&block.logs[*index].transaction_hash.unwrap_or_default())
            }
            (
                StreamEvent::Log {
                    block,
                    index,
                    removed,
                },
                _,
            ) => block.log_json(*index, *removed),
        }
    }
}

/// The payload kinds, in the order [`EventBatch`] caches them.
const PAYLOAD_KINDS: [Payload; 3] = [Payload::Hash, Payload::Full, Payload::FullBlockvision];

fn kind_slot(kind: Payload) -> usize {
    PAYLOAD_KINDS
        .iter()
        .position(|k| *k == kind)
        .expect("every payload kind has a slot")
}

/// The events of one stream from one chain event, shared by every filter
/// actor consuming that stream.
#[derive(Debug)]
pub struct EventBatch {
    pub source: Source,
    events: Vec<StreamEvent>,
    /// The packed layout, built on first use: a batch no filter subscribes
    /// to is never encoded.
    encoded: OnceLock<Vec<u8>>,
    /// Per event, per payload kind: the serialized payload.
    payloads: Vec<[OnceLock<Arc<str>>; 3]>,
}

impl EventBatch {
    pub fn new(source: Source, events: Vec<StreamEvent>) -> Self {
        let payloads = events.iter().map(|_| Default::default()).collect();
        Self {
            source,
            events,
            encoded: OnceLock::new(),
            payloads,
        }
    }

    /// Splits a chain event into its stream batches (empty ones left out).
    pub fn from_chain_event(event: &ChainEvent) -> Vec<EventBatch> {
        let batches = match event {
            ChainEvent::Pending(txs) => {
                vec![EventBatch::new(
                    Source::PendingTransactions,
                    txs.iter().cloned().map(StreamEvent::Pending).collect(),
                )]
            }
            ChainEvent::Added(block) => vec![
                EventBatch::new(Source::Heads, vec![StreamEvent::Head(block.clone())]),
                Self::block_stream(block, Source::MinedTransactions, false),
                Self::block_stream(block, Source::Logs, false),
            ],
            ChainEvent::Removed(block) => vec![
                Self::block_stream(block, Source::MinedTransactions, true),
                Self::block_stream(block, Source::Logs, true),
            ],
        };
        batches
            .into_iter()
            .filter(|b| !b.events.is_empty())
            .collect()
    }

    /// A block's transactions or logs; a removed block's in reverse, so a
    /// reorg undoes exactly what was delivered, last first
    /// (docs/architecture.md, Decided semantics).
    fn block_stream(block: &Arc<Block>, source: Source, removed: bool) -> EventBatch {
        let count = match source {
            Source::MinedTransactions => block.transactions.len(),
            _ => block.logs.len(),
        };
        let mut events: Vec<StreamEvent> = (0..count)
            .map(|index| match source {
                Source::MinedTransactions => StreamEvent::Mined {
                    block: block.clone(),
                    index,
                    removed,
                },
                _ => StreamEvent::Log {
                    block: block.clone(),
                    index,
                    removed,
                },
            })
            .collect();
        if removed {
            events.reverse();
        }
        EventBatch::new(source, events)
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn events(&self) -> &[StreamEvent] {
        &self.events
    }

    /// The batch in the filter contract's packed layout.
    pub fn encoded(&self) -> &[u8] {
        self.encoded.get_or_init(|| self.encode())
    }

    /// The JSON payload of event `index` in `kind`, serialized once.
    pub fn payload(&self, index: usize, kind: Payload) -> &Arc<str> {
        self.payloads[index][kind_slot(kind)]
            .get_or_init(|| self.events[index].payload_json(kind).into())
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = BatchWriter::new(self.source, self.events.len());
        for event in &self.events {
            match event {
                StreamEvent::Pending(tx) => push_tx(&mut w, tx, 0, false),
                StreamEvent::Mined {
                    block,
                    index,
                    removed,
                } => push_tx(
                    &mut w,
                    &block.transactions[*index],
                    block.number(),
                    *removed,
                ),
                StreamEvent::Head(block) => {
                    let h = &block.header;
                    w.push_head(&HeadFields {
                        number: h.number,
                        timestamp: h.timestamp,
                        hash: &block.hash.0,
                        parent_hash: &h.parent_hash.0,
                        miner: &h.beneficiary.0.0,
                        gas_used: h.gas_used,
                        gas_limit: h.gas_limit,
                        base_fee: h.base_fee_per_gas.unwrap_or(0),
                    })
                }
                StreamEvent::Log {
                    block,
                    index,
                    removed,
                } => {
                    let log = &block.logs[*index];
                    let topics: Vec<[u8; 32]> = log.topics().iter().map(|t| t.0).collect();
                    w.push_log(&LogFields {
                        address: &log.address().0.0,
                        topics: &topics,
                        data: &log.data().data,
                        block_number: block.number(),
                        log_index: layout_index(log.log_index),
                        transaction_index: layout_index(log.transaction_index),
                        transaction_hash: &log.transaction_hash.unwrap_or_default().0,
                        removed: *removed,
                    })
                }
            }
        }
        w.finish()
    }
}

/// A position as the batch layout's u32 field holds it. A block's gas
/// limit keeps real positions far below 2^32; a larger one (only a
/// malformed source could send it) saturates rather than wrapping to a
/// small, wrong index.
fn layout_index(position: Option<u64>) -> u32 {
    u32::try_from(position.unwrap_or_default()).unwrap_or(u32::MAX)
}

fn push_tx(w: &mut BatchWriter, tx: &Transaction, block_number: u64, removed: bool) {
    w.push_tx(&TxFields {
        hash: &tx.hash.0,
        from: &tx.from.0.0,
        to: tx.to.as_ref().map(|a| &a.0.0),
        tx_type: tx.tx_type,
        value: &tx.value.to_be_bytes::<32>(),
        nonce: tx.nonce,
        gas: tx.gas,
        block_number,
        input: &tx.input,
        removed,
    });
}

/// What a source (the devnet or a node) produces; the chain's canonical
/// tracker turns it into [`ChainEvent`]s.
#[derive(Clone, Debug)]
pub enum SourceEvent {
    /// New transactions seen in the mempool.
    Pending(Vec<Arc<Transaction>>),
    /// A block, canonical as far as the source knows; a block whose parent is
    /// not the current tip makes the tracker reorganise.
    Block(Arc<Block>),
    /// Everything the source sent before this is its past (the devnet's
    /// generated history): placed in the window and the price index, never
    /// notified. Sent once; the chain is ready from here on.
    Synced,
}

#[cfg(test)]
mod tests {
    use super::super::devnet::{Devnet, DevnetSettings};
    use super::*;

    /// Positions in the block of a batch's transactions or logs.
    fn positions(batch: &EventBatch) -> Vec<usize> {
        batch
            .events()
            .iter()
            .map(|event| match event {
                StreamEvent::Mined { index, .. } | StreamEvent::Log { index, .. } => *index,
                StreamEvent::Pending(_) | StreamEvent::Head(_) => {
                    unreachable!("block streams only")
                }
            })
            .collect()
    }

    /// A removed block's transactions and logs come in the exact reverse
    /// of their first delivery: an undo, last first.
    #[test]
    fn a_removed_block_is_undone_last_first() {
        let mut devnet = Devnet::new(1, &DevnetSettings::default());
        let block = std::iter::repeat_with(|| devnet.next_step())
            .flatten()
            .find_map(|event| match event {
                SourceEvent::Block(b) if b.transactions.len() >= 2 && b.logs.len() >= 2 => Some(b),
                _ => None,
            })
            .expect("the devnet mines busy blocks");
        let stream = |event: ChainEvent, source: Source| {
            EventBatch::from_chain_event(&event)
                .into_iter()
                .find(|batch| batch.source == source)
                .expect("a batch of that stream")
        };
        for source in [Source::MinedTransactions, Source::Logs] {
            let added = positions(&stream(ChainEvent::Added(block.clone()), source));
            let removed = positions(&stream(ChainEvent::Removed(block.clone()), source));
            assert_eq!(added, (0..added.len()).collect::<Vec<_>>(), "{source:?}");
            assert_eq!(
                removed,
                added.iter().rev().copied().collect::<Vec<_>>(),
                "{source:?}"
            );
        }
    }

    #[test]
    fn positions_saturate_instead_of_wrapping() {
        assert_eq!(layout_index(Some(7)), 7);
        assert_eq!(layout_index(None), 0);
        assert_eq!(layout_index(Some(u64::from(u32::MAX) + 5)), u32::MAX);
    }
}
