//! The built-in `bvMinedTransactions` component (contract 0.3), its rules
//! in `chainsieve-transactions-filter`: as the 0.2 build (its batches
//! carry only the sender, the receiver and the selector; each
//! subscription's reach lets the host skip the rest), and `fromAddress`
//! and `toAddress` may each name a watchlist (docs/src/watchlists.md).

use chainsieve_filter_sdk_0_3::{Delivery, Manifest, Payload, Source, export_filter, rules_filter};

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
