//! The `newPendingTransactions` component built for contract 0.1 (tests
//! and the benchmark; the built-in is the 0.2 build), geth's semantics: every
//! pending transaction goes to every subscription, as its hash, or as the
//! full transaction (with `null` block fields) when subscribed with `true`
//! (`chainsieve-broadcast-rules`).

use chainsieve_filter_sdk::{Manifest, Payload, Source, export_filter, rules_filter};

rules_filter!(
    NewPendingTransactions,
    chainsieve_broadcast_rules::PendingRules,
    TxView,
    Manifest {
        topic: "newPendingTransactions",
        source: Source::PendingTransactions,
        payload: Payload::Hash,
    }
);

export_filter!(NewPendingTransactions);
