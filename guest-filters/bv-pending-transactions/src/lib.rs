//! The built-in `bvPendingTransactions` component: transactions filtered by
//! `fromAddress` / `toAddress` / `methodIds` (rules in
//! `chainsieve-transactions-filter`).

use chainsieve_filter_sdk::{Manifest, Payload, Source, export_filter};
use chainsieve_transactions_filter::{Topic, TransactionFilter};

/// Marks the topic this component serves.
#[derive(Debug)]
pub struct BvPending;

impl Topic for BvPending {
    const MANIFEST: Manifest = Manifest {
        topic: "bvPendingTransactions",
        source: Source::PendingTransactions,
        payload: Payload::FullBlockvision,
    };
}

/// The component's filter type.
pub type BvPendingFilter = TransactionFilter<BvPending>;

export_filter!(BvPendingFilter);
