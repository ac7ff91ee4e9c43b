//! The component harness over the shipped fixture event files: the
//! fixtures are what the seeded devnet really generates; every built-in
//! answers through the harness what its native build answers over them,
//! and each built-in's 0.2 build what its 0.1 build answers; the 0.2
//! decoded-transfers example writes the payloads expected of it; and
//! `chainsieve filter test` runs the examples with `--expect`.

use std::path::{Path, PathBuf};
use std::process::Command;

use chainsieve_config::FiltersConfig;
use chainsieve_filter_sdk::projection::{log_fields, tx_fields};
use chainsieve_filter_sdk::{Filter, Source, match_batch};
use chainsieve_filters::batch::EventBatch;
use chainsieve_filters::harness::{Harness, Match, read_events};
use chainsieve_filters::registry::{BUILT_FILTERS_DIR, builtin_components};
use chainsieve_ingest::devnet::{Devnet, DevnetSettings, known_tokens};
use chainsieve_model::SourceEvent;
use chainsieve_model::{TxPosition, TxShape};
use chainsieve_tests::filters::decoded_transfer;
use serde_json::Value;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/events")
}

/// The fixture file of each source stream.
const FIXTURES: [(Source, &str); 4] = [
    (Source::PendingTransactions, "pending-transactions.jsonl"),
    (Source::MinedTransactions, "mined-transactions.jsonl"),
    (Source::Heads, "heads.jsonl"),
    (Source::Logs, "logs.jsonl"),
];

/// Ethereum's devnet under seed 7 for 12 blocks, in the wire shapes.
fn generate() -> [String; 4] {
    let settings = DevnetSettings {
        seed: 7,
        genesis_timestamp: Some(1_700_000_000),
        history_blocks: 0,
        ..DevnetSettings::default()
    };
    let mut devnet = Devnet::new(1, &settings);
    let mut files: [String; 4] = Default::default();
    let mut line = |file: usize, json: String| {
        files[file].push_str(&json);
        files[file].push('\n');
    };
    let mut blocks = 0;
    while blocks < 12 {
        for event in devnet.next_step() {
            match event {
                SourceEvent::Pending { txs, .. } => {
                    for tx in txs {
                        line(0, tx.to_json(TxShape::Geth, TxPosition::Pending, false));
                    }
                }
                SourceEvent::Block(block) => {
                    blocks += 1;
                    for index in 0..block.transactions.len() {
                        line(1, block.transaction_json(index, TxShape::Geth, false));
                    }
                    line(2, block.header_json());
                    for index in 0..block.logs.len() {
                        line(3, block.log_json(index, false));
                    }
                }
                SourceEvent::Synced
                | SourceEvent::Logged { .. }
                | SourceEvent::Finality { .. }
                | SourceEvent::Dropped(_) => {
                    unreachable!("steps carry no marker")
                }
            }
        }
    }
    files
}

/// Run with `CHAINSIEVE_WRITE_FIXTURES=1` to regenerate them after a
/// deliberate change to the devnet or the wire shapes.
#[test]
fn the_fixtures_are_what_the_devnet_generates() {
    let generated = generate();
    let write = std::env::var_os("CHAINSIEVE_WRITE_FIXTURES").is_some();
    for ((_, file), text) in FIXTURES.iter().zip(&generated) {
        let path = fixtures_dir().join(file);
        if write {
            std::fs::create_dir_all(fixtures_dir()).expect("fixtures dir");
            std::fs::write(&path, text).expect("write fixture");
        }
        let shipped = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        assert!(
            shipped == *text,
            "{file} differs from the devnet's output; regenerate with CHAINSIEVE_WRITE_FIXTURES=1"
        );
        assert!(
            text.lines().count() >= 12,
            "{file} is too small to test with"
        );
    }
}

fn fixture(source: Source) -> String {
    let file = FIXTURES
        .iter()
        .find(|(s, _)| *s == source)
        .map(|(_, f)| *f)
        .expect("a fixture per source");
    std::fs::read_to_string(fixtures_dir().join(file)).expect("fixture")
}

/// The built-in component of `topic` (contract 0.2) in the harness.
fn harness(topic: &str, batch: usize) -> Harness {
    builtin_components()
        .iter()
        .map(|(file, bytes)| Harness::load(file, bytes, &FiltersConfig::default()).expect("loads"))
        .find(|h| h.manifest().topic == topic)
        .unwrap_or_else(|| panic!("no built-in for {topic}"))
        .with_batch_size(batch)
}

/// The contract 0.1 build of built-in `topic` in the harness.
fn v0_1_harness(topic: &str, batch: usize) -> Harness {
    let (file, bytes) = chainsieve_tests::filters::v0_1_build(topic);
    Harness::load(file, &bytes, &FiltersConfig::default())
        .expect("the 0.1 build loads")
        .with_batch_size(batch)
}

/// The 0.1 build through the harness (in batches of 5, so matches cross
/// batch boundaries) against the native 0.1 filter over the whole fixture.
fn same_over_fixture<F: Filter>(topic: &str, params: &[String]) -> Vec<Match> {
    let mut component = v0_1_harness(topic, 5);
    let mut native = F::default();
    for (id, p) in params.iter().enumerate() {
        component.subscribe(p).expect("call").expect("accepted");
        native.subscribe(id as u64, p).expect("accepted natively");
    }
    let source = F::MANIFEST.source;
    let text = fixture(source);
    let batch = EventBatch::new(source, read_events(source, &text).expect("fixture reads"));
    let mut expected: Vec<Match> = match_batch(&native, &batch.encoded())
        .expect("native")
        .pairs()
        .map(|(event, subscription)| Match {
            event: event as usize,
            subscription,
            payload: None,
        })
        .collect();
    expected.sort_unstable();
    let got = component.run_jsonl(&text).expect("runs");
    assert_eq!(got, expected, "{topic}");
    got
}

/// Distinct values of `field` in a fixture, most frequent first.
fn common(text: &str, field: &str) -> Vec<String> {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for line in text.lines() {
        let value: Value = serde_json::from_str(line).expect("JSON");
        if let Some(v) = value[field].as_str() {
            *counts.entry(v.to_string()).or_default() += 1;
        }
    }
    let mut values: Vec<_> = counts.into_iter().collect();
    values.sort_by_key(|v| std::cmp::Reverse(v.1));
    values.into_iter().map(|(v, _)| v).collect()
}

/// The method selector of the first transaction to `receiver`.
fn selector_sent_to(text: &str, receiver: &str) -> String {
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("JSON"))
        .find(|tx| tx["to"].as_str() == Some(receiver))
        .and_then(|tx| tx["input"].as_str().map(|input| input[..10].to_string()))
        .expect("a call to the receiver")
}

/// Subscriptions of the transaction filters over the fixture: every
/// transaction, a sender (in upper case), a receiver with methods, a
/// sender or a receiver.
fn transaction_params(pending: &str) -> Vec<String> {
    let senders = common(pending, "from");
    let receivers = common(pending, "to");
    vec![
        "[]".to_string(),
        format!(
            r#"[{{"fromAddress":["{}"]}}]"#,
            senders[0].to_uppercase().replace("0X", "0x")
        ),
        format!(
            r#"[{{"toAddress":["{}"],"methodIds":["0xa9059cbb","{}"]}}]"#,
            receivers[0],
            selector_sent_to(pending, &receivers[0])
        ),
        format!(
            r#"[{{"fromAddress":["{}"],"toAddress":["{}"]}}]"#,
            senders[1], receivers[1]
        ),
    ]
}

#[test]
fn transaction_filters_answer_as_natively_over_the_fixtures() {
    let pending = fixture(Source::PendingTransactions);
    let params = transaction_params(&pending);
    let got = same_over_fixture::<chainsieve_bv_pending_transactions::BvPendingFilter>(
        "bvPendingTransactions",
        &params,
    );
    each_matched(&got, params.len(), "bvPendingTransactions");
    let mined = same_over_fixture::<chainsieve_bv_mined_transactions::BvMinedFilter>(
        "bvMinedTransactions",
        &params,
    );
    each_matched(&mined, params.len(), "bvMinedTransactions");
    let hashes = same_over_fixture::<
        chainsieve_new_pending_transactions_filter::NewPendingTransactions,
    >("newPendingTransactions", &["[]".into(), "[true]".into()]);
    assert_eq!(hashes.len(), 2 * pending.lines().count());
}

/// Every one of `subscriptions` matched something: a rule that matches
/// nothing on both sides would otherwise pass unnoticed.
pub(crate) fn each_matched(matches: &[Match], subscriptions: usize, topic: &str) {
    for subscription in 0..subscriptions as u64 {
        assert!(
            matches.iter().any(|m| m.subscription == subscription),
            "{topic}: subscription {subscription} matched nothing"
        );
    }
}

/// Subscriptions of `logs` over the fixture: every log, an address, two
/// addresses with a first topic, two topic positions of any value.
fn log_params(logs: &str) -> Vec<String> {
    let addresses = common(logs, "address");
    let first_topics: Vec<String> = logs
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON")["topics"][0].to_string())
        .collect();
    vec![
        "[]".to_string(),
        format!(r#"[{{"address":"{}"}}]"#, addresses[0]),
        format!(
            r#"[{{"address":["{}","{}"],"topics":[{}]}}]"#,
            addresses[0], addresses[1], first_topics[0]
        ),
        r#"[{"topics":[null,null]}]"#.to_string(),
    ]
}

#[test]
fn the_logs_filter_answers_as_natively_over_the_fixture() {
    let params = log_params(&fixture(Source::Logs));
    let got = same_over_fixture::<chainsieve_logs_filter::Logs>("logs", &params);
    for subscription in 0..params.len() as u64 {
        assert!(got.iter().any(|m| m.subscription == subscription));
    }
}

#[test]
fn new_heads_through_the_harness_gets_every_head() {
    let mut heads = harness("newHeads", 1);
    heads.subscribe("[]").expect("call").expect("accepted");
    let text = fixture(Source::Heads);
    let got = heads.run_jsonl(&text).expect("runs");
    let every: Vec<Match> = (0..text.lines().count())
        .map(|event| Match {
            event,
            subscription: 0,
            payload: None,
        })
        .collect();
    assert_eq!(got, every);
    let refusal = heads.subscribe("[1]").expect("call").expect_err("refused");
    assert!(refusal.contains("newHeads"), "{refusal}");
}

#[test]
fn a_line_that_is_not_an_event_is_named() {
    let error = read_events(Source::Logs, "\n{\"address\": 5}\n").expect_err("refused");
    let message = format!("{error:#}");
    assert!(message.contains("line 2 is not a logs event"), "{message}");
}

const EXAMPLE: &str = "chainsieve_example_erc20_transfers.wasm";

fn example_wasm(file: &str) -> PathBuf {
    Path::new(BUILT_FILTERS_DIR).join(file)
}

/// The USDC `Transfer` logs (three topics) of the logs fixture `logs`:
/// (line, log).
fn usdc_transfers(logs: &str) -> Vec<(usize, Value)> {
    let usdc = format!("{:#x}", known_tokens(1)[0].address);
    let transfer = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";
    logs.lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("JSON"))
        .enumerate()
        .filter(|(_, log)| {
            log["address"].as_str() == Some(usdc.as_str())
                && log["topics"][0].as_str() == Some(transfer)
                && log["topics"].as_array().is_some_and(|t| t.len() == 3)
        })
        .collect()
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_chainsieve"))
        .args(["filter", "test"])
        .args(args)
        .output()
        .expect("running chainsieve filter test")
}

/// `chainsieve filter test` of `wasm` with one subscription of `params`
/// over `events`, against `expect`.
fn expecting(wasm: &Path, params: &str, events: &Path, expect: &Path) -> std::process::Output {
    cli(&[
        "--wasm",
        wasm.to_str().expect("utf-8"),
        "--params",
        params,
        "--events",
        events.to_str().expect("utf-8"),
        "--expect",
        expect.to_str().expect("utf-8"),
    ])
}

/// The example's expected matches are derived here from the fixture (a
/// USDC `Transfer` with three topics), and must equal the file the example
/// ships; the CLI must then agree with that file.
#[test]
fn the_cli_runs_the_example_filter_against_its_expectations() {
    let usdc = format!("{:#x}", known_tokens(1)[0].address);
    let derived: String = usdc_transfers(&fixture(Source::Logs))
        .into_iter()
        .map(|(event, _)| format!("{{\"event\":{event},\"subscription\":0}}\n"))
        .collect();
    assert!(!derived.is_empty(), "the fixture holds USDC transfers");
    let expected_file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/erc20-transfers/expected-usdc.jsonl");
    assert_eq!(
        std::fs::read_to_string(&expected_file).expect("the example's expectations"),
        derived
    );

    let params = format!(r#"[{{"tokens":["{usdc}"]}}]"#);
    let events = fixtures_dir().join("logs.jsonl");
    let run = |expect: &Path| expecting(&example_wasm(EXAMPLE), &params, &events, expect);
    let ok = run(&expected_file);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&ok.stdout), derived);

    // A wrong expectation fails, naming the difference.
    let wrong = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(wrong.path(), "{\"event\":0,\"subscription\":0}\n").expect("write");
    let failed = run(wrong.path());
    assert_eq!(failed.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("unexpected: {\"event\":"), "{stderr}");

    // Refused params exit 2 with the component's message.
    let refused = cli(&[
        "--wasm",
        example_wasm(EXAMPLE).to_str().expect("utf-8"),
        "--params",
        r#"[{"minAmount":"-1"}]"#,
        "--events",
        events.to_str().expect("utf-8"),
    ]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("minAmount must be"));
}

/// The contract 0.2 example, through the harness: it loads as a 0.2
/// component reading only the log fields it declares, and each USDC
/// transfer of the fixture comes with the payload it wrote, equal to the
/// transfer decoded here from the fixture's own JSON; the CLI prints them.
#[test]
fn the_decoded_transfers_example_writes_each_transfer_decoded() {
    let usdc = format!("{:#x}", known_tokens(1)[0].address);
    let logs = fixture(Source::Logs);
    let expected: Vec<(usize, Value)> = usdc_transfers(&logs)
        .into_iter()
        .map(|(event, log)| (event, decoded_transfer(&usdc, &log)))
        .collect();
    assert!(!expected.is_empty(), "the fixture holds USDC transfers");

    let wasm = example_wasm("chainsieve_example_erc20_transfers_decoded.wasm");
    let mut harness = Harness::open(&wasm).expect("loads");
    assert_eq!(
        harness.manifest().layout,
        chainsieve_filters::Layout::Projected(
            log_fields::ADDRESS
                | log_fields::TOPICS
                | log_fields::DATA
                | log_fields::BLOCK_NUMBER
                | log_fields::LOG_INDEX
                | log_fields::TRANSACTION_HASH
        ),
    );
    let params = format!(r#"[{{"tokens":["{usdc}"]}}]"#);
    let (_, delivery) = harness.subscribe(&params).expect("call").expect("accepted");
    assert_eq!(delivery, chainsieve_filters::Delivery::Written);
    let got = harness.run_jsonl(&logs).expect("runs");
    let as_json = |matches: &[Match]| -> Vec<(usize, Value)> {
        matches
            .iter()
            .map(|m| {
                let payload = m.payload.as_deref().expect("a written payload");
                (m.event, serde_json::from_str(payload).expect("JSON"))
            })
            .collect()
    };
    assert_eq!(as_json(&got), expected);

    let events = fixtures_dir().join("logs.jsonl");
    let printed = cli(&[
        "--wasm",
        wasm.to_str().expect("utf-8"),
        "--params",
        &params,
        "--events",
        events.to_str().expect("utf-8"),
    ]);
    assert!(
        printed.status.success(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let lines: Vec<Match> = String::from_utf8_lossy(&printed.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a match"))
        .collect();
    assert_eq!(as_json(&lines), expected);

    // `--expect` compares payloads as JSON values: the expected payloads
    // with their keys in another order (serde_json's sorted map, not the
    // example's order) pass; one amount changed is one difference naming
    // both payloads.
    let expect_file = |payloads: &[Value]| {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        let text: String = expected
            .iter()
            .zip(payloads)
            .map(|((event, _), payload)| {
                let payload = serde_json::to_string(payload).expect("JSON");
                format!(
                    "{}\n",
                    serde_json::json!({"event": event, "subscription": 0, "payload": payload})
                )
            })
            .collect();
        std::fs::write(file.path(), text).expect("write");
        file
    };
    let reordered: Vec<Value> = expected
        .iter()
        .map(|(_, payload)| payload.clone())
        .collect();
    assert_ne!(
        serde_json::to_string(&reordered[0]).expect("JSON"),
        got[0].payload.clone().expect("written"),
        "the expectation's text differs from the payload's"
    );
    let run = |expect: &Path| expecting(&wasm, &params, &events, expect);
    let same = run(expect_file(&reordered).path());
    assert!(
        same.status.success(),
        "{}",
        String::from_utf8_lossy(&same.stderr)
    );
    let mut changed = reordered.clone();
    changed[0]["amount"] = Value::from("1");
    let differs = run(expect_file(&changed).path());
    assert_eq!(differs.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&differs.stderr);
    assert_eq!(stderr.matches("differs:").count(), 1, "{stderr}");
    assert!(
        !stderr.contains("missing:") && !stderr.contains("unexpected:"),
        "{stderr}"
    );
    assert!(stderr.contains(r#""amount":"1""#), "{stderr}");
}

/// The built-in of `topic` (contract 0.2, batches carrying only `fields`,
/// behind its subscriptions' reach) answers as its 0.1 build over the
/// fixture of `source`, in batches of 5, and each subscription gets the
/// same payload kind.
fn v0_2_answers_as_v0_1(topic: &str, source: Source, fields: u32, params: &[String]) {
    let mut v0_1 = v0_1_harness(topic, 5);
    let mut v0_2 = harness(topic, 5);
    assert_eq!(
        v0_2.manifest().layout,
        chainsieve_filters::Layout::Projected(fields)
    );
    for p in params {
        let kind = v0_1.subscribe(p).expect("call").expect("accepted");
        assert_eq!(
            v0_2.subscribe(p).expect("call").expect("accepted"),
            kind,
            "{topic} {p}"
        );
    }
    let text = fixture(source);
    let expected = v0_1.run_jsonl(&text).expect("0.1 runs");
    each_matched(&expected, params.len(), topic);
    assert_eq!(
        v0_2.run_jsonl(&text).expect("0.2 runs"),
        expected,
        "{topic}"
    );
}

/// Every built-in (contract 0.2) answers as its rules' 0.1 build: the
/// transaction rules (sender, receiver and selector only), the logs rules
/// (address and topics only) and the broadcasts (no field, served by the
/// host; the payload kind a subscription chose).
#[test]
fn built_ins_answer_as_their_0_1_builds() {
    let params = transaction_params(&fixture(Source::PendingTransactions));
    let reads = tx_fields::FROM | tx_fields::TO | tx_fields::SELECTOR;
    v0_2_answers_as_v0_1(
        "bvPendingTransactions",
        Source::PendingTransactions,
        reads,
        &params,
    );
    v0_2_answers_as_v0_1(
        "bvMinedTransactions",
        Source::MinedTransactions,
        reads,
        &params,
    );
    v0_2_answers_as_v0_1(
        "logs",
        Source::Logs,
        log_fields::ADDRESS | log_fields::TOPICS,
        &log_params(&fixture(Source::Logs)),
    );
    v0_2_answers_as_v0_1(
        "newHeads",
        Source::Heads,
        0,
        &["[]".to_string(), "[{}]".to_string()],
    );
    v0_2_answers_as_v0_1(
        "newPendingTransactions",
        Source::PendingTransactions,
        0,
        &["[]", "[true]", "[false]"].map(String::from),
    );
}
