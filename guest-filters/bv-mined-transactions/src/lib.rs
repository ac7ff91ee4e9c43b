//! The built-in `bvMinedTransactions` component: transactions filtered by
//! `fromAddress` / `toAddress` / `methodIds` (rules in
//! `chainsieve-transactions-filter`).

use chainsieve_filter_sdk::{Manifest, Payload, Source, export_filter};

chainsieve_transactions_filter::transaction_filter_0_1!(
    BvMinedFilter,
    Manifest {
        topic: "bvMinedTransactions",
        source: Source::MinedTransactions,
        payload: Payload::FullBlockvision,
    }
);

export_filter!(BvMinedFilter);
