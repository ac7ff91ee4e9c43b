//! Host bindings for `chainsieve:filter@0.1.0` (frozen): the WIT's types
//! translated into the version-independent ones of [`super::contract`].
//! Components of this version read layout 1 and never write payloads.

use chainsieve_filter_core::{Matches, Payload, Source};

use super::contract::{Delivery, FilterManifest, Layout};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.1.0",
        world: "filter",
    });
}

use bindings::chainsieve::filter::types as wit;
pub(super) use bindings::{Filter, FilterPre};

pub(super) fn manifest(m: wit::Manifest) -> FilterManifest {
    FilterManifest {
        topic: m.topic,
        source: match m.source {
            wit::Source::PendingTransactions => Source::PendingTransactions,
            wit::Source::MinedTransactions => Source::MinedTransactions,
            wit::Source::Heads => Source::Heads,
            wit::Source::Logs => Source::Logs,
        },
        delivery: delivery(m.payload),
        layout: Layout::Whole,
    }
}

pub(super) fn delivery(p: wit::Payload) -> Delivery {
    Delivery::Kind(match p {
        wit::Payload::Hash => Payload::Hash,
        wit::Payload::Full => Payload::Full,
        wit::Payload::FullBlockvision => Payload::FullBlockvision,
    })
}

pub(super) fn matches(m: wit::Matches) -> Matches {
    Matches {
        events: m.events,
        subscriptions: m.subscriptions,
        ..Matches::default()
    }
}
