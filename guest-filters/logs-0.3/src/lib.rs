//! The built-in `logs` component (contract 0.3), geth's rules in
//! `chainsieve-log-rules`: as the 0.2 build (its batches carry only each
//! log's address and topics; each subscription's reach lets the host skip
//! the rest), and `address` and any topic position may name a watchlist
//! (docs/src/watchlists.md).

use chainsieve_filter_sdk_0_3::{Delivery, Manifest, Payload, Source, export_filter, rules_filter};

rules_filter!(
    Logs,
    chainsieve_log_rules::LogRules,
    LogView,
    chainsieve_log_rules::READS,
    Manifest {
        topic: "logs",
        source: Source::Logs,
        delivery: Delivery::Kind(Payload::Full),
    }
);

export_filter!(Logs);
