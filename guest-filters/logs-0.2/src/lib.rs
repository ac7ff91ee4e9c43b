//! The built-in `logs` rules (`chainsieve-log-rules`) built for contract
//! 0.2: its batches carry only each log's address and topics. Served in
//! tests and measured against the 0.1 build by the `filter_matrix`
//! benchmark; the built-in stays on 0.1 until that says 0.2 pays
//! (docs/architecture.md, Filter contract v0.2).

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
