//! The built-in `logs` component (contract 0.2), geth's rules in
//! `chainsieve-log-rules`: its batches carry only each log's address and
//! topics, and each subscription's reach (its addresses, else its first
//! constrained topic position) lets the host skip the rest
//! (docs/src/architecture.md, Filter contract v0.2).

use chainsieve_filter_sdk_0_2::{Delivery, Manifest, Payload, Source, export_filter, rules_filter};

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
