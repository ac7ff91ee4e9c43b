//! Host bindings for `chainsieve:filter@0.2.0`: the WIT's types translated
//! into the version-independent ones of [`super::contract`]. Components of
//! this version declare the fields they read (layout 2) and may write
//! their payloads.

use chainsieve_filter_core::{Matches, Payload, Source, projection};

use super::contract::{Delivery, FilterManifest, Layout};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2.0",
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

#[cfg(test)]
mod tests {
    use chainsieve_filter_core::projection::{log_fields, tx_fields};

    use super::*;

    /// The WIT's flags reach the host as the projection's bits.
    #[test]
    fn declared_fields_are_the_projection_bits() {
        let declared = wit::TransactionFields::FROM
            | wit::TransactionFields::TO
            | wit::TransactionFields::SELECTOR;
        let manifest = manifest(wit::Manifest {
            topic: "t".into(),
            source: wit::Source::MinedTransactions(declared),
            payload: wit::Payload::Written,
        });
        assert_eq!(
            manifest.layout,
            Layout::Projected(tx_fields::FROM | tx_fields::TO | tx_fields::SELECTOR)
        );
        assert_eq!(manifest.delivery, Delivery::Written);
        let logs = super::manifest(wit::Manifest {
            topic: "t".into(),
            source: wit::Source::Logs(wit::LogFields::all()),
            payload: wit::Payload::Full,
        });
        assert_eq!(logs.layout, Layout::Projected(log_fields::ALL));
    }
}
