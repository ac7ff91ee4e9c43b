//! The built-in `newPendingTransactions` rules (`chainsieve-broadcast-rules`)
//! built for contract 0.2: they read no field, so its batches carry each
//! transaction's flags only. Served in tests and measured against the 0.1
//! build by the `filter_matrix` benchmark; the built-in stays on 0.1 until
//! that says 0.2 pays (docs/architecture.md, Filter contract v0.2).

use chainsieve_filter_sdk_0_2::{Delivery, Manifest, Payload, Source, export_filter, rules_filter};

rules_filter!(
    NewPendingTransactions,
    chainsieve_broadcast_rules::PendingRules,
    TxView,
    chainsieve_broadcast_rules::READS,
    Manifest {
        topic: "newPendingTransactions",
        source: Source::PendingTransactions,
        delivery: Delivery::Kind(Payload::Hash),
    }
);

export_filter!(NewPendingTransactions);
