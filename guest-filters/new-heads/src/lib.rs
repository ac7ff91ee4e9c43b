//! The `newHeads` component built for contract 0.1 (tests and the
//! benchmark; the built-in is the 0.2 build): every canonical header goes
//! to every subscription, in geth's shape (`chainsieve-broadcast-rules`).

use chainsieve_filter_sdk::{Manifest, Payload, Source, export_filter, rules_filter};

rules_filter!(
    NewHeads,
    chainsieve_broadcast_rules::HeadRules,
    HeadView,
    Manifest {
        topic: "newHeads",
        source: Source::Heads,
        payload: Payload::Full,
    }
);

export_filter!(NewHeads);
