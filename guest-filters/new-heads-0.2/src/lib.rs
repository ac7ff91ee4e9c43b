//! The built-in `newHeads` component (contract 0.2), its rules in
//! `chainsieve-broadcast-rules`: every subscription reaches every header,
//! so the host serves them without a call (docs/src/architecture.md, Filter
//! contract v0.2).

use chainsieve_filter_sdk_0_2::{Delivery, Manifest, Payload, Source, export_filter, rules_filter};

rules_filter!(
    NewHeads,
    chainsieve_broadcast_rules::HeadRules,
    HeadView,
    Manifest {
        topic: "newHeads",
        source: Source::Heads,
        delivery: Delivery::Kind(Payload::Full),
    }
);

export_filter!(NewHeads);
