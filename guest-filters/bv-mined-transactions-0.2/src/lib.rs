//! The built-in `bvMinedTransactions` rules (`chainsieve-transactions-filter`) built
//! for contract 0.2: its batches carry only the sender, the receiver and
//! the selector. Served in tests and measured against the 0.1 build by
//! the `filter_matrix` benchmark; the built-in stays on 0.1 until that
//! says 0.2 pays (docs/architecture.md, Filter contract v0.2).

use chainsieve_filter_sdk_0_2::{Delivery, Manifest, Payload, Source, export_filter, rules_filter};

rules_filter!(
    BvMinedFilter,
    chainsieve_transactions_filter::TransactionRules,
    TxView,
    chainsieve_transactions_filter::READS,
    Manifest {
        topic: "bvMinedTransactions",
        source: Source::MinedTransactions,
        delivery: Delivery::Kind(Payload::FullBlockvision),
    }
);

export_filter!(BvMinedFilter);
