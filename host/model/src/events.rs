//! What ingestion hands downstream: what a source produces
//! ([`SourceEvent`]), the [`ChainEvent`]s the canonical tracker orders it
//! into, and [`StreamEvent`], one event of one stream pointing into that
//! shared data, with its notification payloads.

use std::sync::Arc;

use alloy_primitives::B256;
use chainsieve_filter_core::Payload;

use super::lifecycle::Turn;
use super::{Block, Transaction, TxPosition, TxShape};

/// A change to one chain, in the order subscribers must see it. Its serde
/// form is a persisted log's record of a step.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum ChainEvent {
    /// Transactions that entered the mempool.
    Pending(Vec<Arc<Transaction>>),
    /// A block joined the canonical chain.
    Added(Arc<Block>),
    /// A block left the canonical chain in a reorg (sent newest first,
    /// before the new branch's blocks).
    Removed(Arc<Block>),
    /// The watchlists as of edit `n` apply to every event after this step;
    /// the events before it were matched against the set before
    /// (docs/src/watchlists.md, Where an edit applies). No event of its own.
    Watch(u64),
    /// Turns of transactions' lives that the step before decided (the
    /// chain's lifecycle tracker), told by the `transactionLifecycle`
    /// topic (docs/src/api.md, A transaction's life). Appended last, so a
    /// log stored before it reads as it did.
    Lifecycle(Arc<[Turn]>),
}

impl ChainEvent {
    /// The block added or removed; none for pending transactions, a
    /// watchlist edit or lifecycle turns.
    pub fn block(&self) -> Option<&Arc<Block>> {
        match self {
            ChainEvent::Added(block) | ChainEvent::Removed(block) => Some(block),
            ChainEvent::Pending(_) | ChainEvent::Watch(_) | ChainEvent::Lifecycle(_) => None,
        }
    }
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
    /// Turn `index` of a lifecycle step.
    Turn {
        turns: Arc<[Turn]>,
        index: usize,
    },
}

impl StreamEvent {
    /// Serializes the notification payload of `kind` for this event.
    pub fn payload_json(&self, kind: Payload) -> String {
        let quoted = |hash: &alloy_primitives::B256| format!("\"{hash}\"");
        match (self, kind) {
            (StreamEvent::Pending(tx), Payload::Hash) => quoted(&tx.hash),
            (StreamEvent::Pending(tx), Payload::Full) => {
                tx.to_json(TxShape::Geth, TxPosition::Pending, false)
            }
            (StreamEvent::Pending(tx), Payload::FullBlockvision) => {
                tx.to_json(TxShape::Blockvision, TxPosition::Pending, false)
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
                Payload::Full,
            ) => block.transaction_json(*index, TxShape::Geth, *removed),
            (
                StreamEvent::Mined {
                    block,
                    index,
                    removed,
                },
                Payload::FullBlockvision,
            ) => block.transaction_json(*index, TxShape::Blockvision, *removed),
            (
                StreamEvent::Mined {
                    block,
                    index,
                    removed,
                },
                Payload::Receipt,
            ) => {
                // A block stored without receipts (by an older chainsieve)
                // has none to give.
                format!(
                    "[{}]",
                    block.receipt_json(*index, *removed).unwrap_or_default()
                )
            }
            // The filters are held to payloads their events have
            // (`Payload::fits`).
            (
                StreamEvent::Pending(_)
                | StreamEvent::Head(_)
                | StreamEvent::Log { .. }
                | StreamEvent::Turn { .. },
                Payload::Receipt,
            ) => "null".to_string(),
            (StreamEvent::Turn { turns, index }, Payload::Hash) => quoted(&turns[*index].tx.hash),
            (StreamEvent::Turn { turns, index }, _) => turns[*index].to_json(),
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

/// What a source (the devnet or a node) produces; the chain's canonical
/// tracker turns it into [`ChainEvent`]s.
#[derive(Clone, Debug)]
pub enum SourceEvent {
    /// New transactions seen in the mempool, and the node that announced
    /// them (none from the devnet, whose pool is its own).
    Pending {
        txs: Vec<Arc<Transaction>>,
        seen_by: Option<Arc<str>>,
    },
    /// Pending transactions gone from every pool without being mined: the
    /// devnet's dropped ones, or those no node holds any more.
    Dropped(Vec<B256>),
    /// A block, canonical as far as the source knows; a block whose parent is
    /// not the current tip makes the tracker reorganise.
    Block(Arc<Block>),
    /// A change another server's tracker already ordered, at the position
    /// that server's log gave it: what an edge reads from the bus. Placed
    /// as it is, never reordered.
    Logged { position: u64, change: ChainEvent },
    /// Everything the source sent before this is its past (the devnet's
    /// generated history): placed in the window and the price index, never
    /// notified. Sent once; the chain is ready from here on.
    Synced,
    /// How far the chain is final, as the source knows it (the nodes'
    /// `safe` and `finalized` blocks, or the devnet's depths).
    Finality {
        safe: Option<FinalMark>,
        finalized: Option<FinalMark>,
    },
}

/// A block a finality grade has reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalMark {
    pub number: u64,
    /// The block's hash, checked against the canonical chain before the
    /// mark counts; `None` from a source that cannot reorganise that deep
    /// (the devnet).
    pub hash: Option<B256>,
}

/// How final a block is: what a subscription may wait for before it is
/// told of the block (docs/src/api.md, Finality).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grade {
    /// The chain's `safe` block: unlikely to be reorganised.
    Safe,
    /// The chain's `finalized` block: never reorganised.
    Finalized,
}

/// Where a chain's source stands (its nodes, a devnet, or for an ingest
/// its lease), as `/readyz` and `/metrics` report it; the latest value is
/// kept for readiness checks and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceState {
    /// Not connected yet.
    Connecting,
    /// At least one node's heads count.
    Live,
    /// No node's heads count; why, node by node.
    Down { reason: String },
    /// Nodes count, and as many as the quorum are past the chain's tip,
    /// but the tip has not moved for the stall threshold; why.
    Stuck { reason: String },
    /// An ingest waiting for the chain's lease: another ingest leads and
    /// reads the nodes (docs/src/architecture.md, The bus).
    Standby,
}
