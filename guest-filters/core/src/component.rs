//! What a component's filter is made of under every contract version
//! from 0.2 on, for the guest SDKs (one crate per version, each adding its
//! bindings): the [`Manifest`], the [`Event`] views a filter reads, and the
//! [`Out`] it sends an event's matches through; [`each_event`] is the
//! loop of every version's `match-batch`.

use crate::projection::{ProjectedBatch, ProjectedLog, ProjectedTx, source_of};
use crate::{Delivery, Emit, HeadView, LayoutError, Matches, Source, SubscriptionId};

/// A transaction of a batch carrying the fields `F` (bits of
/// [`tx_fields`](crate::projection::tx_fields)); the 0.1 SDK's `TxView`
/// methods.
pub type TxView<'a, const F: u32> = ProjectedTx<'a, F>;

/// A log of a batch carrying the fields `F` (bits of
/// [`log_fields`](crate::projection::log_fields)); the 0.1 SDK's `LogView`
/// methods.
pub type LogView<'a, const F: u32> = ProjectedLog<'a, F>;

/// Describes a component to the host; the fields it reads come from the
/// [`Event`] type its filter reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The `eth_subscribe` event type served.
    pub topic: &'static str,
    pub source: Source,
    /// What a subscription gets unless `subscribe` says otherwise.
    pub delivery: Delivery,
}

/// An event type a filter can consume: a view over one record of a
/// layout-2 batch, and the fields it reads.
pub trait Event<'a>: Sized {
    /// A stream whose batches hold the records this view reads (any of
    /// the same kind will do: pending and mined transactions).
    const KIND: Source;
    /// The fields read: what the manifest declares and batches carry.
    const FIELDS: u32;
    /// Reads every event of a batch of this kind, refusing one that
    /// carries other fields.
    fn all(bytes: &'a [u8]) -> Result<impl Iterator<Item = Self> + 'a, LayoutError>;
}

impl<'a, const F: u32> Event<'a> for TxView<'a, F> {
    const KIND: Source = Source::MinedTransactions;
    const FIELDS: u32 = F;
    fn all(bytes: &'a [u8]) -> Result<impl Iterator<Item = Self> + 'a, LayoutError> {
        ProjectedBatch::<F>::parse(bytes)?.transactions()
    }
}

impl<'a> Event<'a> for HeadView<'a> {
    const KIND: Source = Source::Heads;
    const FIELDS: u32 = 0;
    fn all(bytes: &'a [u8]) -> Result<impl Iterator<Item = Self> + 'a, LayoutError> {
        ProjectedBatch::<0>::parse(bytes)?.heads()
    }
}

impl<'a, const F: u32> Event<'a> for LogView<'a, F> {
    const KIND: Source = Source::Logs;
    const FIELDS: u32 = F;
    fn all(bytes: &'a [u8]) -> Result<impl Iterator<Item = Self> + 'a, LayoutError> {
        ProjectedBatch::<F>::parse(bytes)?.logs()
    }
}

/// A payload a filter wrote for the event at hand; send it to any number
/// of subscriptions, it crosses to the host once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written(u32);

/// Where a filter sends one event's matches.
#[derive(Debug)]
pub struct Out<'m> {
    matches: &'m mut Matches,
    event: u32,
    /// Reused for every payload written through [`Out::write_with`].
    scratch: &'m mut String,
}

impl Out<'_> {
    /// Sends the event to `id` with the subscription's payload kind.
    pub fn send(&mut self, id: SubscriptionId) {
        self.matches.push(self.event, id);
    }

    /// Keeps `json` (one JSON value) as a payload of this event.
    pub fn write(&mut self, json: &str) -> Written {
        Written(self.matches.write_payload(json.as_bytes()))
    }

    /// Keeps the payload `write` puts in the (emptied) buffer it is given.
    pub fn write_with(&mut self, write: impl FnOnce(&mut String)) -> Written {
        self.scratch.clear();
        write(self.scratch);
        Written(self.matches.write_payload(self.scratch.as_bytes()))
    }

    /// Sends the event to `id` with a payload written for it.
    pub fn send_written(&mut self, id: SubscriptionId, payload: Written) {
        self.matches.push_written(self.event, id, payload.0);
    }
}

/// Rules (version-independent, `chainsieve-filter-core`) send through an
/// `Out` directly; a list goes in one copy.
impl Emit for Out<'_> {
    #[inline(always)]
    fn emit(&mut self, id: SubscriptionId) {
        self.send(id);
    }

    fn emit_all(&mut self, ids: &[SubscriptionId]) {
        self.matches.push_all(self.event, ids);
    }
}

/// The loop of `match-batch`: every event of `bytes` (a batch of
/// `source`, read as `E`) handed to `each` with its number and the [`Out`]
/// its matches go through.
pub fn each_event<'a, E: Event<'a>>(
    bytes: &'a [u8],
    source: Source,
    mut each: impl FnMut(u32, &E, &mut Out<'_>),
) -> Result<Matches, LayoutError> {
    let found = source_of(bytes)?;
    if found != source {
        return Err(LayoutError::WrongSource {
            expected: source,
            found,
        });
    }
    let mut matches = Matches::default();
    let mut scratch = String::new();
    for (index, event) in E::all(bytes)?.enumerate() {
        let mut out = Out {
            matches: &mut matches,
            event: index as u32,
            scratch: &mut scratch,
        };
        each(index as u32, &event, &mut out);
    }
    Ok(matches)
}

/// The guest side's conversions of every contract version from 0.2 on,
/// whose WIT types of the same names have the same shape: expanded in each
/// SDK's private module, with its version's `wit` types in scope (the
/// keys, which differ between versions, each SDK converts itself). Not part
/// of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! __projected_conversions {
    // `$receipt`: the version's `receipt` payload, or what to do without
    // one; `$lifecycle`: its `lifecycle` source (of `transactions`, the
    // flags), or what to do without one.
    ($receipt:expr, |$transactions:ident| $lifecycle:expr) => {
        pub fn manifest(m: Manifest, fields: u32) -> wit::Manifest {
            // The WIT flags' bits are the projection's (bit i, the i-th flag).
            let $transactions =
                wit::TransactionFields::from_bits_truncate(fields.try_into().unwrap_or(u16::MAX));
            wit::Manifest {
                topic: m.topic.to_string(),
                source: match m.source {
                    Source::PendingTransactions => wit::Source::PendingTransactions($transactions),
                    Source::MinedTransactions => wit::Source::MinedTransactions($transactions),
                    Source::Lifecycle => $lifecycle,
                    Source::Heads => wit::Source::Heads,
                    Source::Logs => wit::Source::Logs(wit::LogFields::from_bits_truncate(
                        fields.try_into().unwrap_or(u8::MAX),
                    )),
                },
                payload: delivery(m.delivery),
            }
        }

        pub fn delivery(d: Delivery) -> wit::Payload {
            match d {
                Delivery::Kind(Payload::Hash) => wit::Payload::Hash,
                Delivery::Kind(Payload::Full) => wit::Payload::Full,
                Delivery::Kind(Payload::FullBlockvision) => wit::Payload::FullBlockvision,
                Delivery::Kind(Payload::Receipt) => $receipt,
                Delivery::Written => wit::Payload::Written,
            }
        }

        pub fn matches(m: Matches) -> wit::Matches {
            wit::Matches {
                events: m.events,
                subscriptions: m.subscriptions,
                payloads: m.payloads,
                payload_bytes: m.payload_bytes,
                payload_ends: m.payload_ends,
            }
        }
    };
}
