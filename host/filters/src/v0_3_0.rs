//! Host bindings for `chainsieve:filter@0.3.0`: the WIT's types translated
//! into the version-independent ones of [`super::contract`]. What 0.3 adds
//! to 0.2: a subscription may reach the events whose field holds an
//! address of a watchlist, and each batch comes with its events'
//! memberships (docs/src/architecture.md, Filter contract v0.3).

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

projected_conversions!(
    payloads: [wit::Payload::Receipt => Delivery::Kind(Payload::Receipt)],
    sources: [wit::Source::Lifecycle(fields) => (Source::Lifecycle, fields.as_array()[0])],
);

fn key(k: wit::Key) -> anyhow::Result<Key> {
    Ok(match k {
        wit::Key::Sender(a) => Key::Sender(sized("sender", a)?),
        wit::Key::Receiver(a) => Key::Receiver(sized("receiver", a)?),
        wit::Key::Selector(s) => Key::Selector(sized("selector", s)?),
        wit::Key::Emitter(a) => Key::Emitter(sized("emitter", a)?),
        wit::Key::Topic((position, t)) => Key::Topic(position, sized("topic", t)?),
        wit::Key::Watched((field, list)) => Key::Watched(watched_field(field), list),
    })
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
