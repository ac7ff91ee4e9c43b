//! The `bvPendingTransactions` rules built for contract 0.1 (tests and the
//! benchmark; the built-in is the 0.2 build): transactions filtered by
//! `fromAddress` / `toAddress` / `methodIds` (rules in
//! `chainsieve-transactions-filter`).

use chainsieve_filter_sdk::{Manifest, Payload, Source, export_filter, rules_filter};

rules_filter!(
    BvPendingFilter,
    chainsieve_transactions_filter::TransactionRules,
    TxView,
    Manifest {
        topic: "bvPendingTransactions",
        source: Source::PendingTransactions,
        payload: Payload::FullBlockvision,
    }
);

export_filter!(BvPendingFilter);
