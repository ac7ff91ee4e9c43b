//! The built-in `bvPendingTransactions` component (contract 0.2), its rules
//! in `chainsieve-transactions-filter`: its batches carry only the sender,
//! the receiver and the selector, and each subscription's reach (its
//! senders and receivers, else its methods, else every transaction) lets
//! the host skip the rest (docs/src/architecture.md, Filter contract v0.2).

use chainsieve_filter_sdk_0_2::{Delivery, Manifest, Payload, Source, export_filter, rules_filter};

rules_filter!(
    BvPendingFilter,
    chainsieve_transactions_filter::TransactionRules,
    TxView,
    chainsieve_transactions_filter::READS,
    Manifest {
        topic: "bvPendingTransactions",
        source: Source::PendingTransactions,
        delivery: Delivery::Kind(Payload::FullBlockvision),
    }
);

export_filter!(BvPendingFilter);
