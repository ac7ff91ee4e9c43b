//! The events of one stream from one logged step, shared by every filter
//! actor consuming that stream. A batch is encoded for the filter
//! components once, and each event's notification payload and cursor (its
//! [`Notice`]) are made at most once, however many topics and subscribers
//! it reaches.

use std::sync::{Arc, Mutex, OnceLock};

use chainsieve_filter_core::layout::{BatchWriter, EventWriter, HeadFields, LogFields, TxFields};
use chainsieve_filter_core::projection::ProjectedWriter;
use chainsieve_filter_core::{Payload, Source};

use chainsieve_eventlog::cursor::Cursor;
use chainsieve_eventlog::{self as eventlog, Position, Step};
use chainsieve_fanout::{Notice, Together};
use chainsieve_model::lifecycle::TxBrief;
use chainsieve_model::{Block, Transaction};
use chainsieve_model::{ChainEvent, StreamEvent};
use chainsieve_watchlists::views::View;

/// The payload kinds, in the order [`EventBatch`] caches them.
const PAYLOAD_KINDS: [Payload; 4] = [
    Payload::Hash,
    Payload::Full,
    Payload::FullBlockvision,
    Payload::Receipt,
];

fn kind_slot(kind: Payload) -> usize {
    PAYLOAD_KINDS
        .iter()
        .position(|k| *k == kind)
        .expect("every payload kind has a slot")
}

/// Where a batch's events sit in a log, for their cursors.
#[derive(Clone, Debug)]
struct Origin {
    chain: Arc<str>,
    /// `None` for a block read from the nodes (history).
    position: Option<Position>,
    /// The step's block number, if it is a block's.
    block: Option<u64>,
    tag: u64,
}

/// What is made at most once per event: its notice in each payload kind,
/// and its cursor.
#[derive(Debug, Default)]
struct Slot {
    notices: [OnceLock<Notice>; PAYLOAD_KINDS.len()],
    cursor: OnceLock<Box<str>>,
}

/// The events of one stream from one step, shared by every filter actor
/// consuming that stream.
#[derive(Debug)]
pub struct EventBatch {
    pub source: Source,
    /// `None` for events outside any log (the component harness's).
    origin: Option<Origin>,
    events: Vec<StreamEvent>,
    /// The packed layout, built on first use: a batch no filter subscribes
    /// to is never encoded.
    encoded: OnceLock<Arc<[u8]>>,
    /// Layout 2, by field set, built on first use: one per distinct set
    /// the stream's components declare. Held while one is encoded, so each
    /// set is encoded once.
    projected: Mutex<Vec<(u32, Arc<[u8]>)>>,
    slots: Vec<Slot>,
    /// Shared by the step's batches when several actors take them: their
    /// frames to a connection go out in one write once the last batch is
    /// let go.
    together: Option<Arc<Together>>,
    /// The watchlists as of the last edit placed before its step, held
    /// while the batch is in flight so the index keeps that view
    /// (docs/src/watchlists.md, Where an edit applies); `None` where no
    /// watchlists are kept.
    view: Option<Arc<View>>,
}

impl EventBatch {
    /// Events outside any log: they match, but have no cursors.
    pub fn new(source: Source, events: Vec<StreamEvent>) -> Self {
        let slots = events.iter().map(|_| Slot::default()).collect();
        Self {
            source,
            origin: None,
            events,
            encoded: OnceLock::new(),
            projected: Mutex::default(),
            slots,
            together: None,
            view: None,
        }
    }

    /// Splits a step of `chain`'s log into its stream batches, in the
    /// order subscribers see them (empty ones left out).
    pub fn of_step(step: &Step, chain: &Arc<str>) -> Vec<EventBatch> {
        let sources: &[Source] = match step.change {
            ChainEvent::Pending(_) => &[Source::PendingTransactions],
            ChainEvent::Added(_) => &[Source::Heads, Source::MinedTransactions, Source::Logs],
            ChainEvent::Removed(_) => &[Source::MinedTransactions, Source::Logs],
            ChainEvent::Watch(_) => &[],
            ChainEvent::Lifecycle(_) => &[Source::Lifecycle],
        };
        sources
            .iter()
            .filter_map(|source| Self::stream_of(step, chain, *source))
            .collect()
    }

    /// The batch of `source` in a step of `chain`'s log, if it has events
    /// of that stream.
    pub fn stream_of(step: &Step, chain: &Arc<str>, source: Source) -> Option<EventBatch> {
        Self::of_change(&step.change, chain, source, Some(step.position), step.tag)
    }

    /// The batch of `source` in `block`, read from `chain`'s nodes older
    /// than the log (history): its cursors name the block, not a position.
    pub fn of_history(block: &Arc<Block>, chain: &Arc<str>, source: Source) -> Option<EventBatch> {
        let change = ChainEvent::Added(block.clone());
        let tag = eventlog::tag(&change);
        Self::of_change(&change, chain, source, None, tag)
    }

    fn of_change(
        change: &ChainEvent,
        chain: &Arc<str>,
        source: Source,
        position: Option<Position>,
        tag: u64,
    ) -> Option<EventBatch> {
        let events = match (change, source) {
            (ChainEvent::Pending(txs), Source::PendingTransactions) => {
                txs.iter().cloned().map(StreamEvent::Pending).collect()
            }
            (ChainEvent::Added(block), Source::Heads) => vec![StreamEvent::Head(block.clone())],
            (ChainEvent::Added(block), Source::MinedTransactions | Source::Logs) => {
                block_stream(block, source, false)
            }
            (ChainEvent::Removed(block), Source::MinedTransactions | Source::Logs) => {
                block_stream(block, source, true)
            }
            (ChainEvent::Lifecycle(turns), Source::Lifecycle) => (0..turns.len())
                .map(|index| StreamEvent::Turn {
                    turns: turns.clone(),
                    index,
                })
                .collect(),
            _ => Vec::new(),
        };
        if events.is_empty() {
            return None;
        }
        let mut batch = Self::new(source, events);
        batch.origin = Some(Origin {
            chain: chain.clone(),
            position,
            block: change.block().map(|block| block.number()),
            tag,
        });
        Some(batch)
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Matches this batch as of the watchlists' `view`.
    pub fn hold_view(&mut self, view: Arc<View>) {
        self.view = Some(view);
    }

    /// The view of the watchlists this batch is matched against.
    pub fn view(&self) -> Option<&Arc<View>> {
        self.view.as_ref()
    }

    /// Makes this batch one of the step's delivered [`Together`].
    pub fn deliver_together(&mut self, together: Arc<Together>) {
        self.together = Some(together);
    }

    /// The step's group, if its actors hold their frames for one write.
    pub fn together(&self) -> Option<&Together> {
        self.together.as_deref()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn events(&self) -> &[StreamEvent] {
        &self.events
    }

    /// The batch in layout 1 (contract 0.1).
    pub fn encoded(&self) -> Arc<[u8]> {
        self.encoded
            .get_or_init(|| {
                self.encode(BatchWriter::new(self.source, self.events.len()))
                    .into()
            })
            .clone()
    }

    /// The batch in layout 2, carrying `fields` (contract 0.2).
    pub fn projected(&self, fields: u32) -> Arc<[u8]> {
        let mut projected = self
            .projected
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, bytes)) = projected.iter().find(|(made, _)| *made == fields) {
            return bytes.clone();
        }
        let writer = ProjectedWriter::new(self.source, fields, self.events.len());
        let bytes: Arc<[u8]> = self.encode(writer).into();
        projected.push((fields, bytes.clone()));
        bytes
    }

    /// The step of the log the events are of (0 outside any log).
    pub fn position(&self) -> Position {
        self.origin
            .as_ref()
            .and_then(|origin| origin.position)
            .unwrap_or(0)
    }

    /// What every notification of event `index` in payload `kind` carries
    /// after the subscription id: the payload, serialized once, and the
    /// cursor.
    pub fn notice(&self, index: usize, kind: Payload) -> &Notice {
        self.slots[index].notices[kind_slot(kind)]
            .get_or_init(|| Notice::new(&self.events[index].payload_json(kind), self.cursor(index)))
    }

    /// The cursor of event `index`, made once (`None` outside any log).
    pub fn cursor(&self, index: usize) -> Option<&str> {
        let origin = self.origin.as_ref()?;
        let cursor = self.slots[index].cursor.get_or_init(|| {
            Cursor {
                chain: origin.chain.to_string(),
                position: origin.position,
                block: origin.block,
                index: u32::try_from(index).unwrap_or(u32::MAX),
                tag: origin.tag,
            }
            .to_string()
            .into()
        });
        Some(cursor)
    }

    fn encode(&self, mut w: impl EventWriter) -> Vec<u8> {
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
                StreamEvent::Turn { turns, index } => {
                    let turn = &turns[*index];
                    // A turn's call data is its selector alone; a filter
                    // reading `input` is refused at load.
                    let selector = turn.tx.selector.unwrap_or_default();
                    let input: &[u8] = if turn.tx.selector.is_some() {
                        &selector
                    } else {
                        &[]
                    };
                    let block_number = turn.stage.block().map_or(0, |b| b.number);
                    push_brief(&mut w, &turn.tx, input, block_number, false);
                }
            }
        }
        w.finish()
    }
}

/// A block's transactions or logs; a removed block's in reverse, so a
/// reorg undoes exactly what was delivered, last first
/// (docs/src/api.md, Semantics).
fn block_stream(block: &Arc<Block>, source: Source, removed: bool) -> Vec<StreamEvent> {
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
    events
}

/// A position as the batch layout's u32 field holds it. A block's gas
/// limit keeps real positions far below 2^32; a larger one (only a
/// malformed source could send it) saturates rather than wrapping to a
/// small, wrong index.
fn layout_index(position: Option<u64>) -> u32 {
    u32::try_from(position.unwrap_or_default()).unwrap_or(u32::MAX)
}

fn push_tx(w: &mut impl EventWriter, tx: &Transaction, block_number: u64, removed: bool) {
    push_brief(w, &TxBrief::of(tx), &tx.input, block_number, removed);
}

/// A transaction record of `tx` (a transaction's fields, or a turn's).
fn push_brief(
    w: &mut impl EventWriter,
    tx: &TxBrief,
    input: &[u8],
    block_number: u64,
    removed: bool,
) {
    w.push_tx(&TxFields {
        hash: &tx.hash.0,
        from: &tx.from.0.0,
        to: tx.to.as_ref().map(|a| &a.0.0),
        tx_type: tx.tx_type,
        value: &tx.value.to_be_bytes::<32>(),
        nonce: tx.nonce,
        gas: tx.gas,
        block_number,
        input,
        removed,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use chainsieve_eventlog::EventLog;
    use chainsieve_ingest::devnet::{Devnet, DevnetSettings};
    use chainsieve_model::SourceEvent;

    /// Positions in the block of a batch's transactions or logs.
    fn positions(batch: &EventBatch) -> Vec<usize> {
        batch
            .events()
            .iter()
            .map(|event| match event {
                StreamEvent::Mined { index, .. } | StreamEvent::Log { index, .. } => *index,
                StreamEvent::Pending(_) | StreamEvent::Head(_) | StreamEvent::Turn { .. } => {
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
        let log = EventLog::new("eth", 1_024, 256);
        let stream = |event: ChainEvent, source: Source| {
            let step = log.append(event);
            EventBatch::stream_of(&step, log.chain(), source).expect("a batch of that stream")
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
