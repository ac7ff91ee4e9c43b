//! The `logs` component built for contract 0.1 (tests and the benchmark;
//! the built-in is the 0.2 build), with geth's filter rules
//! (`chainsieve-log-rules`).

use chainsieve_filter_sdk::{Manifest, Payload, Source, export_filter, rules_filter};

rules_filter!(
    Logs,
    chainsieve_log_rules::LogRules,
    LogView,
    Manifest {
        topic: "logs",
        source: Source::Logs,
        payload: Payload::Full,
    }
);

export_filter!(Logs);
