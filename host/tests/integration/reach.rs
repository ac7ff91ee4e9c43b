//! Property: a built-in behind its subscriptions' reach (the host's
//! narrowing, `chainsieve_filters::reach`) answers exactly what it answers
//! about every event. Subscriptions and events are drawn from a few
//! addresses, selectors and topics, so most of them meet; every shape of
//! parameters the rules accept is drawn (no constraint, senders,
//! receivers, methods alone or with addresses; addresses, topic positions
//! with `null`s and alternatives). A reach that left out a match would
//! lose a notification without a word, so this runs natively over many
//! cases; the harness test holds the components to the same over the
//! fixtures.
//!
//! `CHAINSIEVE_FUZZ_CASES` sets the number of cases (default 2,000).

use chainsieve_filter_sdk_0_2::layout::{LogFields, TxFields};
use chainsieve_filter_sdk_0_2::{Filter, Matches, ProjectedWriter, Source, match_batch};
use chainsieve_filters::Layout;
use chainsieve_filters::reach::ReachIndex;
use proptest::prelude::*;
use proptest::test_runner::{Config as Runner, TestRunner};

use chainsieve_bv_pending_transactions_0_2::BvPendingFilter as BvPending;
use chainsieve_logs_filter_0_2::Logs;

fn runner() -> TestRunner {
    let cases = std::env::var("CHAINSIEVE_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    TestRunner::new(Runner {
        cases,
        failure_persistence: None,
        ..Runner::default()
    })
}

fn hex(bytes: &[u8]) -> String {
    format!(
        "\"0x{}\"",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

fn list(items: &[String]) -> String {
    format!("[{}]", items.join(","))
}

const ADDRESSES: u8 = 5;
const SELECTORS: u8 = 3;
const TOPICS: u8 = 4;

fn address(i: u8) -> [u8; 20] {
    [0x10 + i; 20]
}

fn selector(i: u8) -> [u8; 4] {
    [0xa0 + i, 0, 0, i]
}

fn topic(i: u8) -> [u8; 32] {
    [0x70 + i; 32]
}

/// A `bvPendingTransactions` subscription's parameters: senders,
/// receivers and methods, each absent or a short list.
fn tx_params() -> impl Strategy<Value = String> {
    let some = |n: u8| prop::option::of(prop::collection::vec(0..n, 0..3));
    (some(ADDRESSES), some(ADDRESSES), some(SELECTORS)).prop_map(|(from, to, methods)| {
        let mut members = Vec::new();
        let named = |name: &str, items: Vec<String>| format!("\"{name}\":{}", list(&items));
        if let Some(from) = from {
            members.push(named(
                "fromAddress",
                from.iter().map(|&i| hex(&address(i))).collect(),
            ));
        }
        if let Some(to) = to {
            members.push(named(
                "toAddress",
                to.iter().map(|&i| hex(&address(i))).collect(),
            ));
        }
        if let Some(methods) = methods {
            members.push(named(
                "methodIds",
                methods.iter().map(|&i| hex(&selector(i))).collect(),
            ));
        }
        format!("[{{{}}}]", members.join(","))
    })
}

/// A transaction: sender, receiver (`None`: a creation), and input (none,
/// too short for a selector, or a call of a method).
fn transaction() -> impl Strategy<Value = (u8, Option<u8>, Vec<u8>)> {
    let input = prop_oneof![
        Just(Vec::new()),
        Just(vec![0xa0, 0]),
        (0..SELECTORS).prop_map(|i| [&selector(i)[..], &[1, 2, 3]].concat()),
    ];
    (0..ADDRESSES, prop::option::of(0..ADDRESSES), input)
}

/// One topic position of a `logs` filter: `null`, a topic, or
/// alternatives that may hold a `null`.
fn position() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("null".to_string()),
        (0..TOPICS).prop_map(|i| hex(&topic(i))),
        prop::collection::vec(prop::option::of(0..TOPICS), 0..3).prop_map(|options| {
            let items: Vec<String> = options
                .iter()
                .map(|o| o.map_or("null".to_string(), |i| hex(&topic(i))))
                .collect();
            list(&items)
        }),
    ]
}

/// A `logs` subscription's parameters: addresses and topic positions,
/// each absent or drawn.
fn log_params() -> impl Strategy<Value = String> {
    (
        prop::option::of(prop::collection::vec(0..ADDRESSES, 0..3)),
        prop::option::of(prop::collection::vec(position(), 0..4)),
    )
        .prop_map(|(addresses, topics)| {
            let mut members = Vec::new();
            if let Some(addresses) = addresses {
                let items: Vec<String> = addresses.iter().map(|&i| hex(&address(i))).collect();
                members.push(format!("\"address\":{}", list(&items)));
            }
            if let Some(topics) = topics {
                members.push(format!("\"topics\":{}", list(&topics)));
            }
            format!("[{{{}}}]", members.join(","))
        })
}

/// A log: its contract and 0-4 topics.
fn log() -> impl Strategy<Value = (u8, Vec<u8>)> {
    (0..ADDRESSES, prop::collection::vec(0..TOPICS, 0..5))
}

/// The pairs of an answer, in one order (the host serves `every`
/// subscriptions after the component's pairs).
fn sorted(matches: &Matches) -> Vec<(u32, u64)> {
    let mut pairs: Vec<_> = matches.pairs().collect();
    pairs.sort_unstable();
    pairs
}

/// The fields filter `F`'s batches carry.
fn fields_of<F: Filter>() -> u32 {
    <F::Event<'static> as chainsieve_filter_sdk_0_2::Event<'static>>::FIELDS
}

/// `filter` subscribed with `params` (each accepted one also into a reach
/// index) answers `batch` the same behind the reach as on every event.
fn same_behind_reach<F: Filter>(params: &[String], batch: &[u8]) -> Result<(), TestCaseError> {
    let mut filter = F::default();
    let mut reach = ReachIndex::new(F::MANIFEST.source, Layout::Projected(fields_of::<F>()));
    let mut accepted = 0;
    for (id, p) in params.iter().enumerate() {
        if let Ok(delivery) = filter.subscribe(id as u64, p) {
            reach
                .insert(id as u64, filter.reach(id as u64), delivery)
                .map_err(|e| TestCaseError::fail(format!("{p}: {e:#}")))?;
            accepted += 1;
        }
    }
    // Nothing subscribed would make both sides empty, and the case vacuous.
    if !params.is_empty() && accepted == 0 {
        return Err(TestCaseError::fail(format!(
            "every subscription refused: {params:?}"
        )));
    }
    let every = match_batch(&filter, batch).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let narrowed = reach
        .run(batch, None, |part, _| {
            match_batch(&filter, part).map_err(anyhow::Error::msg)
        })
        .map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
    prop_assert_eq!(sorted(&narrowed), sorted(&every), "{:?}", params);
    Ok(())
}

#[test]
fn transaction_rules_behind_their_reach_miss_nothing() {
    let case = (
        prop::collection::vec(tx_params(), 1..6),
        prop::collection::vec(transaction(), 0..12),
    );
    runner()
        .run(&case, |(params, txs)| {
            let fields = fields_of::<BvPending>();
            let mut w = ProjectedWriter::new(Source::PendingTransactions, fields, txs.len());
            for (from, to, input) in &txs {
                w.push_tx(&TxFields::call(
                    &address(*from),
                    to.map(address).as_ref(),
                    input,
                ));
            }
            same_behind_reach::<BvPending>(&params, &w.finish())
        })
        .expect("the transaction rules' reach leaves out no match");
}

#[test]
fn log_rules_behind_their_reach_miss_nothing() {
    let case = (
        prop::collection::vec(log_params(), 1..6),
        prop::collection::vec(log(), 0..12),
    );
    runner()
        .run(&case, |(params, logs)| {
            let mut w = ProjectedWriter::new(Source::Logs, fields_of::<Logs>(), logs.len());
            for (contract, topics) in &logs {
                let topics: Vec<[u8; 32]> = topics.iter().map(|&i| topic(i)).collect();
                w.push_log(&LogFields::emitted(
                    &address(*contract),
                    &topics[..topics.len().min(4)],
                ));
            }
            same_behind_reach::<Logs>(&params, &w.finish())
        })
        .expect("the log rules' reach leaves out no match");
}
