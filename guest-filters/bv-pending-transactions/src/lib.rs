//! The built-in `bvPendingTransactions` component: transactions filtered by
//! `fromAddress` / `toAddress` / `methodIds` (rules in
//! `chainsieve-transactions-filter`).

use chainsieve_filter_sdk::{Manifest, Payload, Source, export_filter};

chainsieve_transactions_filter::transaction_filter_0_1!(
    BvPendingFilter,
    Manifest {
        topic: "bvPendingTransactions",
        source: Source::PendingTransactions,
        payload: Payload::FullBlockvision,
    }
);

export_filter!(BvPendingFilter);
