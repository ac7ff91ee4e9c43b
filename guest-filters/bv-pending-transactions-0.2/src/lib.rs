//! The built-in `bvPendingTransactions` rules (`chainsieve-transactions-filter`) built
//! for contract 0.2: its batches carry only the sender, the receiver and
//! the selector. Served in tests and measured against the 0.1 build by
//! the `filter_matrix` benchmark; the built-in stays on 0.1 until that
//! says 0.2 pays (docs/architecture.md, Filter contract v0.2).

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
