//! The built-in `transactionLifecycle` component (contract 0.3): the turns
//! of transactions' lives (pending, replaced, dropped, mined, safe,
//! finalized) by geth's `transactionHashes`, and-ed with the transaction
//! filters' members (watchlists included), its rules in
//! `chainsieve-transactions-filter` ([`HashedRules`]); each match goes out
//! as the turn (docs/src/api.md, A transaction's life).
//!
//! [`HashedRules`]: chainsieve_transactions_filter::HashedRules

use chainsieve_filter_sdk_0_3::{Delivery, Manifest, Payload, Source, export_filter, rules_filter};

rules_filter!(
    TransactionLifecycle,
    chainsieve_transactions_filter::HashedRules,
    TxView,
    chainsieve_transactions_filter::HASHED_READS,
    Manifest {
        topic: "transactionLifecycle",
        source: Source::Lifecycle,
        delivery: Delivery::Kind(Payload::Full),
    }
);

export_filter!(TransactionLifecycle);
