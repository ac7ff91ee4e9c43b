//! Host bindings for `chainsieve:filter@0.2.0`: the WIT's types translated
//! into the version-independent ones of [`super::contract`]. Components of
//! this version declare the fields they read (layout 2) and may write
//! their payloads.

use chainsieve_filter_core::{Key, Matches, Payload, Reach, Source, projection};

use super::contract::{Delivery, FilterManifest, Layout};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.2.0",
        world: "filter",
    });
}

use bindings::chainsieve::filter::types as wit;
pub(super) use bindings::{Filter, FilterPre};

projected_conversions!(payloads: [], sources: []);

fn key(k: wit::Key) -> anyhow::Result<Key> {
    Ok(match k {
        wit::Key::Sender(a) => Key::Sender(sized("sender", a)?),
        wit::Key::Receiver(a) => Key::Receiver(sized("receiver", a)?),
        wit::Key::Selector(s) => Key::Selector(sized("selector", s)?),
        wit::Key::Emitter(a) => Key::Emitter(sized("emitter", a)?),
        wit::Key::Topic((position, t)) => Key::Topic(position, sized("topic", t)?),
    })
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

    /// Keys reach the host as the core's; one of the wrong length is a bad
    /// answer that names it.
    #[test]
    fn keys_are_read_and_mis_sized_ones_refused() {
        let answer = |keys: Vec<wit::Key>| {
            subscription(wit::Subscription {
                payload: wit::Payload::Full,
                reach: wit::Reach::Keyed(keys),
            })
        };
        let (delivery, reach) = answer(vec![
            wit::Key::Sender(vec![1; 20]),
            wit::Key::Selector(vec![2; 4]),
            wit::Key::Topic((3, vec![4; 32])),
        ])
        .expect("well-sized keys");
        assert_eq!(delivery, Delivery::Kind(Payload::Full));
        assert_eq!(
            reach,
            Reach::Keys(vec![
                Key::Sender([1; 20]),
                Key::Selector([2; 4]),
                Key::Topic(3, [4; 32])
            ])
        );
        let short = answer(vec![wit::Key::Emitter(vec![1; 19])]).expect_err("19 bytes");
        assert!(
            short
                .to_string()
                .contains("emitter key of 19 bytes (20 expected)"),
            "{short}"
        );
        let every = subscription(wit::Subscription {
            payload: wit::Payload::Hash,
            reach: wit::Reach::Every,
        });
        assert_eq!(every.expect("every").1, Reach::Every);
    }
}
