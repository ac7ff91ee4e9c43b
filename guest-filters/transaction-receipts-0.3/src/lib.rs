//! The built-in `transactionReceipts` component (contract 0.3), its rules
//! in `chainsieve-transactions-filter` ([`HashedRules`]): geth's
//! `transactionHashes`, and-ed with the transaction filters' members
//! (watchlists included); each match goes out as the transaction's
//! receipt (docs/src/api.md, eth_subscribe: the topic
//! `transactionReceipts`).
//!
//! [`HashedRules`]: chainsieve_transactions_filter::HashedRules

use chainsieve_filter_sdk_0_3::{Delivery, Manifest, Payload, Source, export_filter, rules_filter};

rules_filter!(
    TransactionReceipts,
    chainsieve_transactions_filter::HashedRules,
    TxView,
    chainsieve_transactions_filter::HASHED_READS,
    Manifest {
        topic: "transactionReceipts",
        source: Source::MinedTransactions,
        delivery: Delivery::Kind(Payload::Receipt),
    }
);

export_filter!(TransactionReceipts);
