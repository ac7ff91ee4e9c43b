//! The built-in `newHeads` rules (`chainsieve-broadcast-rules`) built for
//! contract 0.2. Served in tests and measured against the 0.1 build by the
//! `filter_matrix` benchmark; the built-in stays on 0.1 until that says 0.2
//! pays (docs/architecture.md, Filter contract v0.2).

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
