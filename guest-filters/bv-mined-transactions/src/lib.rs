//! The built-in `bvMinedTransactions` component: transactions filtered by
//! `fromAddress` / `toAddress` / `methodIds` (rules in
//! `chainsieve-transactions-filter`).

use chainsieve_filter_sdk::{Manifest, Payload, Source, export_filter};
use chainsieve_transactions_filter::{Topic, TransactionFilter};

/// Marks the topic this component serves.
#[derive(Debug)]
pub struct BvMined;

impl Topic for BvMined {
    const MANIFEST: Manifest = Manifest {
        topic: "bvMinedTransactions",
        source: Source::MinedTransactions,
        payload: Payload::FullBlockvision,
    };
}

/// The component's filter type.
pub type BvMinedFilter = TransactionFilter<BvMined>;

export_filter!(BvMinedFilter);
