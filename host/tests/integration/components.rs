//! The built-in topics' contract 0.1 builds, loaded through the component
//! harness (the server's engine, the real WIT exports), must answer exactly
//! what the same filter logic answers compiled natively (the 0.2 built-ins
//! are held to these builds' answers in `harness.rs`); the built-ins'
//! manifests; and the registry's and the engine's refusals.

use chainsieve_config::FiltersConfig;
use chainsieve_filter_sdk::layout::{BatchWriter, LogFields, TxFields};
use chainsieve_filter_sdk::projection::{log_fields, tx_fields};
use chainsieve_filter_sdk::{Batch, Filter, Payload, Source, match_batch};
use chainsieve_filters::harness::{Harness, Match};
use chainsieve_filters::registry::builtin_components;
use chainsieve_filters::{Delivery, FilterEngine, Layout};

fn engine() -> std::sync::Arc<FilterEngine> {
    FilterEngine::new(&FiltersConfig::default()).expect("engine")
}

/// A deterministic mix of transactions over a few senders and receivers.
fn tx_batch(source: Source, count: usize) -> Vec<u8> {
    let mut w = BatchWriter::new(source, count);
    for i in 0..count {
        let from = [(i % 7) as u8; 20];
        let to = [(i % 5) as u8 + 100; 20];
        let input: &[u8] = if i % 3 == 0 {
            &[0xa9, 0x05, 0x9c, 0xbb, 0, 0]
        } else {
            &[]
        };
        w.push_tx(&TxFields {
            hash: &[i as u8; 32],
            from: &from,
            to: (i % 11 != 0).then_some(&to),
            tx_type: (i % 2 * 2) as u8,
            value: &[0; 32],
            nonce: i as u64,
            gas: 21_000,
            block_number: 0,
            input,
            removed: false,
        });
    }
    w.finish()
}

fn address(byte: u8) -> String {
    format!("0x{}", format!("{byte:02x}").repeat(20))
}

const TX_PARAMS: &[&str] = &[
    "[]",
    r#"[{"methodIds":["0xa9059cbb"]}]"#,
    "[{\"fromAddress\":[\"FROM1\"],\"toAddress\":[\"TO2\"]}]",
    "[{\"fromAddress\":[\"FROM3\",\"FROM4\"],\"methodIds\":[\"0xa9059cbb\"]}]",
    "[{\"toAddress\":[\"TO0\"]}]",
];

fn tx_params() -> Vec<String> {
    TX_PARAMS
        .iter()
        .map(|p| {
            let mut p = p.to_string();
            for i in 0..7u8 {
                p = p.replace(&format!("FROM{i}"), &address(i));
            }
            for i in 0..5u8 {
                p = p.replace(
                    &format!("TO{i}"),
                    &address(i + 100).to_uppercase().replace("0X", "0x"),
                );
            }
            p
        })
        .collect()
}

/// The contract 0.1 build of built-in `topic` in the harness: what the
/// native 0.1 filters answer as (the 0.2 built-ins are held to these
/// builds' answers in `harness.rs`).
fn harness(topic: &str) -> Harness {
    let (file, bytes) = chainsieve_tests::filters::v0_1_build(topic);
    Harness::load(file, &bytes, &FiltersConfig::default()).expect("the 0.1 build loads")
}

/// Subscribes the same params natively and in the component (through the
/// harness), and compares the matches of `batch`, order included.
fn same_answers<F: Filter>(topic: &str, params: &[String], batch: &[u8]) -> usize {
    let mut component = harness(topic);
    let mut native = F::default();
    for (id, p) in params.iter().enumerate() {
        let (number, wasm_payload) = component.subscribe(p).expect("call").expect("accepted");
        assert_eq!(number, id as u64);
        let native_payload = native.subscribe(id as u64, p).expect("accepted natively");
        assert_eq!(wasm_payload, Delivery::Kind(native_payload));
    }
    let expected: Vec<Match> = match_batch(&native, batch)
        .expect("native match")
        .pairs()
        .map(|(event, subscription)| Match {
            event: event as usize,
            subscription,
            payload: None,
        })
        .collect();
    let len = Batch::parse(batch).expect("a batch").len();
    let wasm = component.run_encoded(batch, len).expect("match");
    assert_eq!(wasm, expected, "{topic}");
    crate::harness::each_matched(&wasm, params.len(), topic);
    wasm.len()
}

/// The built-ins are contract 0.2 and 0.3 builds, each reading only the
/// fields its rules do.
#[test]
fn manifests_declare_the_seven_topics() {
    let engine = engine();
    let mut topics: Vec<_> = builtin_components()
        .iter()
        .map(|(file, bytes)| {
            let c = engine.load(file, bytes).expect("loads");
            (
                c.manifest.topic,
                c.manifest.source,
                c.manifest.delivery,
                c.manifest.layout,
                c.version,
            )
        })
        .collect();
    topics.sort_by(|a, b| a.0.cmp(&b.0));
    let transactions = Layout::Projected(tx_fields::FROM | tx_fields::TO | tx_fields::SELECTOR);
    // The transaction topics' and `logs`' built-ins are 0.3 builds (their
    // filters take watchlists); the others 0.2.
    let built_in = |topic: &str, source, payload, layout| {
        let version =
            if topic.starts_with("bv") || topic == "logs" || topic.starts_with("transaction") {
                "0.3.0"
            } else {
                "0.2.0"
            };
        (
            topic.to_string(),
            source,
            Delivery::Kind(payload),
            layout,
            version.to_string(),
        )
    };
    assert_eq!(
        topics,
        vec![
            built_in(
                "bvMinedTransactions",
                Source::MinedTransactions,
                Payload::FullBlockvision,
                transactions
            ),
            built_in(
                "bvPendingTransactions",
                Source::PendingTransactions,
                Payload::FullBlockvision,
                transactions
            ),
            built_in(
                "logs",
                Source::Logs,
                Payload::Full,
                Layout::Projected(log_fields::ADDRESS | log_fields::TOPICS)
            ),
            built_in(
                "newHeads",
                Source::Heads,
                Payload::Full,
                Layout::Projected(0)
            ),
            built_in(
                "newPendingTransactions",
                Source::PendingTransactions,
                Payload::Hash,
                Layout::Projected(0)
            ),
            built_in(
                "transactionLifecycle",
                Source::Lifecycle,
                Payload::Full,
                Layout::Projected(
                    tx_fields::HASH | tx_fields::FROM | tx_fields::TO | tx_fields::SELECTOR
                )
            ),
            built_in(
                "transactionReceipts",
                Source::MinedTransactions,
                Payload::Receipt,
                Layout::Projected(
                    tx_fields::HASH | tx_fields::FROM | tx_fields::TO | tx_fields::SELECTOR
                )
            ),
        ]
    );
}

#[test]
fn bv_pending_transactions_component_matches_native() {
    type Native = chainsieve_bv_pending_transactions::BvPendingFilter;
    let n = same_answers::<Native>(
        "bvPendingTransactions",
        &tx_params(),
        &tx_batch(Source::PendingTransactions, 200),
    );
    assert!(
        n > 200,
        "every kind of filter should match something, got {n} pairs"
    );
}

#[test]
fn bv_mined_transactions_component_matches_native() {
    type Native = chainsieve_bv_mined_transactions::BvMinedFilter;
    let n = same_answers::<Native>(
        "bvMinedTransactions",
        &tx_params(),
        &tx_batch(Source::MinedTransactions, 64),
    );
    assert!(n > 64);
}

#[test]
fn new_pending_transactions_component_matches_native() {
    type Native = chainsieve_new_pending_transactions_filter::NewPendingTransactions;
    let params = vec!["[]".to_string(), "[true]".to_string()];
    assert_eq!(
        same_answers::<Native>(
            "newPendingTransactions",
            &params,
            &tx_batch(Source::PendingTransactions, 10)
        ),
        20
    );
}

#[test]
fn logs_component_matches_native() {
    type Native = chainsieve_logs_filter::Logs;
    let topic = |b: u8| format!("0x{}", format!("{b:02x}").repeat(32));
    let params = vec![
        "[]".to_string(),
        format!(r#"[{{"address":"{}"}}]"#, address(1)),
        // Log i has topics (i + t) % 10 for t below i % 5: this matches
        // the logs whose i ends in 4 (3 never comes with 5 at position 2).
        format!(
            r#"[{{"topics":[["{}","{}"],null,"{}"]}}]"#,
            topic(3),
            topic(4),
            topic(6)
        ),
        format!(
            r#"[{{"address":["{}","{}"],"topics":[null,["{}",null]]}}]"#,
            address(2),
            address(3),
            topic(4)
        ),
    ];
    let mut w = BatchWriter::new(Source::Logs, 100);
    for i in 0..100u8 {
        let topics: Vec<[u8; 32]> = (0..(i % 5)).map(|t| [(i + t) % 10; 32]).collect();
        w.push_log(&LogFields {
            address: &[i % 4; 20],
            topics: &topics,
            data: &[i; 3],
            block_number: 1,
            log_index: i as u32,
            transaction_index: 0,
            transaction_hash: &[0; 32],
            removed: false,
        });
    }
    assert!(same_answers::<Native>("logs", &params, &w.finish()) > 100);
}

#[test]
fn refusals_cross_the_boundary_as_messages() {
    let mut logs = harness("logs");
    let refusal = logs
        .subscribe(r#"[{"topics":[1]}]"#)
        .expect("call")
        .expect_err("refused");
    assert!(
        refusal.contains("topics[0] must be null, a topic or an array"),
        "{refusal}"
    );
    // A batch of the wrong stream is the guest's error, not a trap.
    let heads = BatchWriter::new(Source::Heads, 0).finish();
    let error = logs.run_encoded(&heads, 0).expect_err("wrong stream");
    assert!(format!("{error:#}").contains("consumes Logs"), "{error:#}");
}

fn builtin_bytes(topic_file: &str) -> &'static [u8] {
    builtin_components()
        .iter()
        .find(|(file, _)| file.contains(topic_file))
        .map(|(_, bytes)| *bytes)
        .expect("built-in file")
}

#[test]
fn a_component_in_the_filters_dir_replaces_the_builtin_of_its_topic() {
    let engine = engine();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("my_heads.wasm");
    std::fs::write(&file, builtin_bytes("new_heads")).expect("write");
    std::fs::write(dir.path().join("README.txt"), "not a component").expect("write");
    let registry = chainsieve_filters::FilterRegistry::load(&engine, dir.path()).expect("loads");
    let active = registry.active();
    let heads = active.get("newHeads").expect("newHeads");
    assert_eq!(heads.origin, file.display().to_string());
    assert!(
        active
            .get("logs")
            .expect("logs")
            .origin
            .starts_with("built-in ")
    );
    assert_eq!(active.len(), 7);
}

#[test]
fn a_bad_component_stops_startup_naming_the_file_and_the_reason() {
    let engine = engine();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("broken.wasm");
    std::fs::write(&file, b"\0asm not really").expect("write");
    let error = chainsieve_filters::FilterRegistry::load(&engine, dir.path()).expect_err("refused");
    let message = format!("{error:#}");
    assert!(message.contains(&file.display().to_string()), "{message}");
    assert!(message.contains("compiling"), "{message}");
}

#[test]
fn two_components_with_one_topic_are_refused() {
    let engine = engine();
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["a.wasm", "b.wasm"] {
        std::fs::write(dir.path().join(name), builtin_bytes("logs_filter")).expect("write");
    }
    let message = format!(
        "{:#}",
        chainsieve_filters::FilterRegistry::load(&engine, dir.path()).expect_err("refused")
    );
    assert!(
        message.contains("a.wasm")
            && message.contains("b.wasm")
            && message.contains("both declare topic logs"),
        "{message}"
    );
}

#[test]
fn a_component_for_another_contract_version_is_refused_naming_both() {
    let engine = engine();
    // The built-in newHeads with its contract import renamed to 0.9.0 (same
    // length, so still a well-formed component).
    let mut bytes = builtin_bytes("new_heads").to_vec();
    let (from, to) = (
        b"chainsieve:filter/types@0.2.0".as_slice(),
        b"chainsieve:filter/types@0.9.0".as_slice(),
    );
    let mut renamed = 0;
    for at in 0..bytes.len() - from.len() {
        if &bytes[at..at + from.len()] == from {
            bytes[at..at + to.len()].copy_from_slice(to);
            renamed += 1;
        }
    }
    assert!(renamed > 0, "the contract import is named in the binary");
    let error = engine
        .load("future.wasm", &bytes)
        .expect_err("an unsupported version is refused");
    let message = format!("{error:#}");
    assert!(
        message.contains("future.wasm")
            && message.contains("targets chainsieve:filter@0.9.0")
            && message.contains("serves chainsieve:filter@0.1.0"),
        "{message}"
    );
}

#[test]
fn a_component_without_the_contract_is_refused_saying_so() {
    let engine = engine();
    // A valid component that imports nothing: the contract is missing.
    let empty = b"\0asm\x0d\0\x01\0";
    let message = format!(
        "{:#}",
        engine.load("empty.wasm", empty).expect_err("refused")
    );
    assert!(
        message.contains("does not use the chainsieve:filter contract"),
        "{message}"
    );
}

/// A rescan is lenient: a file that no longer loads is reported and its
/// last good version serves on; a second file for a served topic is
/// reported; a removed file falls back to the built-in.
#[test]
fn a_rescan_keeps_what_serves_and_reports_the_rest() {
    let engine = engine();
    let dir = tempfile::tempdir().expect("dir");
    let mine = dir.path().join("a-logs.wasm");
    std::fs::write(&mine, builtin_bytes("logs_filter")).expect("write");
    let mut registry =
        chainsieve_filters::FilterRegistry::load(&engine, dir.path()).expect("loads");

    std::fs::write(&mine, b"half a file").expect("write");
    let second = dir.path().join("b-logs.wasm");
    std::fs::write(&second, builtin_bytes("logs_filter")).expect("write");
    registry.rescan(&engine, dir.path());
    assert_eq!(registry.active()["logs"].origin, mine.display().to_string());
    let rejected = registry.rejected();
    assert_eq!(rejected.len(), 2, "{rejected:?}");
    assert_eq!(rejected[0].file, mine);
    assert_eq!(rejected[1].file, second);
    assert!(
        rejected[1].reason.contains("already served by"),
        "{}",
        rejected[1].reason
    );

    std::fs::remove_file(&mine).expect("remove");
    std::fs::remove_file(&second).expect("remove");
    registry.rescan(&engine, dir.path());
    assert!(registry.active()["logs"].origin.starts_with("built-in "));
    assert!(registry.rejected().is_empty());
}
