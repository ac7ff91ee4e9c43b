//! The `bvMinedTransactions` rules built for contract 0.1 (tests and the
//! benchmark; the built-in is the 0.2 build): transactions filtered by
//! `fromAddress` / `toAddress` / `methodIds` (rules in
//! `chainsieve-transactions-filter`).

use chainsieve_filter_sdk::{Manifest, Payload, Source, export_filter, rules_filter};

rules_filter!(
    BvMinedFilter,
    chainsieve_transactions_filter::TransactionRules,
    TxView,
    Manifest {
        topic: "bvMinedTransactions",
        source: Source::MinedTransactions,
        payload: Payload::FullBlockvision,
    }
);

export_filter!(BvMinedFilter);
