//! Host bindings for `chainsieve:filter@0.3.0`: the WIT's types translated
//! into the version-independent ones of [`super::contract`]. What 0.3 adds
//! to 0.2: a subscription may reach the events whose field holds an
//! address of a watchlist, and each batch comes with its events'
//! memberships (docs/src/architecture.md, Filter contract v0.3).

use anyhow::bail;
use chainsieve_filter_core::{
    Key, Matches, Memberships, Payload, Reach, Source, WatchedField, projection,
};

use super::contract::{Delivery, FilterManifest, Layout};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.3.0",
        world: "filter",
    });
}

use bindings::chainsieve::filter::types as wit;
pub(super) use bindings::{Filter, FilterPre};

pub(super) fn manifest(m: wit::Manifest) -> FilterManifest {
    // A `flags` of at most 32 flags is one word, bit i the i-th flag: the
    // bits `chainsieve_filter_core::projection` numbers fields with.
    let (source, fields) = match m.source {
        wit::Source::PendingTransactions(fields) => {
            (Source::PendingTransactions, fields.as_array()[0])
        }
        wit::Source::MinedTransactions(fields) => (Source::MinedTransactions, fields.as_array()[0]),
        wit::Source::Heads => (Source::Heads, 0),
        wit::Source::Logs(fields) => (Source::Logs, fields.as_array()[0]),
    };
    FilterManifest {
        topic: m.topic,
        source,
        delivery: delivery(m.payload),
        layout: Layout::Projected(fields & projection::all_fields(source)),
    }
}

/// What a subscription receives and can match, as the component answered
/// it; a key of the wrong length is a bad answer.
pub(super) fn subscription(s: wit::Subscription) -> anyhow::Result<(Delivery, Reach)> {
    let reach = match s.reach {
        wit::Reach::Every => Reach::Every,
        wit::Reach::Any => Reach::Any,
        wit::Reach::Keyed(keys) => {
            Reach::Keys(keys.into_iter().map(key).collect::<Result<_, _>>()?)
        }
    };
    Ok((delivery(s.payload), reach))
}

fn key(k: wit::Key) -> anyhow::Result<Key> {
    fn sized<const N: usize>(what: &str, bytes: Vec<u8>) -> anyhow::Result<[u8; N]> {
        match <[u8; N]>::try_from(bytes) {
            Ok(value) => Ok(value),
            Err(bytes) => bail!(
                "the filter answered a {what} key of {} bytes ({N} expected)",
                bytes.len()
            ),
        }
    }
    Ok(match k {
        wit::Key::Sender(a) => Key::Sender(sized("sender", a)?),
        wit::Key::Receiver(a) => Key::Receiver(sized("receiver", a)?),
        wit::Key::Selector(s) => Key::Selector(sized("selector", s)?),
        wit::Key::Emitter(a) => Key::Emitter(sized("emitter", a)?),
        wit::Key::Topic((position, t)) => Key::Topic(position, sized("topic", t)?),
        wit::Key::Watched((field, list)) => Key::Watched(watched_field(field), list),
    })
}

pub(super) fn delivery(p: wit::Payload) -> Delivery {
    match p {
        wit::Payload::Hash => Delivery::Kind(Payload::Hash),
        wit::Payload::Full => Delivery::Kind(Payload::Full),
        wit::Payload::FullBlockvision => Delivery::Kind(Payload::FullBlockvision),
        wit::Payload::Written => Delivery::Written,
    }
}

pub(super) fn matches(m: wit::Matches) -> Matches {
    Matches {
        events: m.events,
        subscriptions: m.subscriptions,
        payloads: m.payloads,
        payload_bytes: m.payload_bytes,
        payload_ends: m.payload_ends,
    }
}

fn watched_field(field: wit::WatchedField) -> WatchedField {
    match field {
        wit::WatchedField::Sender => WatchedField::Sender,
        wit::WatchedField::Receiver => WatchedField::Receiver,
        wit::WatchedField::Emitter => WatchedField::Emitter,
        wit::WatchedField::Topic0 => WatchedField::Topic(0),
        wit::WatchedField::Topic1 => WatchedField::Topic(1),
        wit::WatchedField::Topic2 => WatchedField::Topic(2),
        wit::WatchedField::Topic3 => WatchedField::Topic(3),
    }
}

/// A batch's memberships as the WIT carries them: three columns.
pub(super) fn memberships(m: &Memberships) -> wit::Memberships {
    let entries = m.entries();
    wit::Memberships {
        events: entries.iter().map(|(event, ..)| *event).collect(),
        fields: entries
            .iter()
            .map(|(_, field, _)| match field {
                WatchedField::Sender => wit::WatchedField::Sender,
                WatchedField::Receiver => wit::WatchedField::Receiver,
                WatchedField::Emitter => wit::WatchedField::Emitter,
                WatchedField::Topic(0) => wit::WatchedField::Topic0,
                WatchedField::Topic(1) => wit::WatchedField::Topic1,
                WatchedField::Topic(2) => wit::WatchedField::Topic2,
                WatchedField::Topic(_) => wit::WatchedField::Topic3,
            })
            .collect(),
        watchlists: entries.iter().map(|(.., list)| *list).collect(),
    }
}
