//! The built-in `newPendingTransactions` component (contract 0.2), its
//! rules in `chainsieve-broadcast-rules`: they read no field, and every
//! subscription reaches every transaction, so the host serves them
//! without a call, as hashes or full transactions as each subscription
//! chose (docs/src/architecture.md, Filter contract v0.2).

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
