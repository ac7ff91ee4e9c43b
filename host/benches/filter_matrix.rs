//! Every built-in topic's contract 0.1 build, the WebAssembly component
//! against the same Rust logic compiled natively: 10, 1,000 and 100,000
//! subscriptions, batches of 1, 64 and 1,024 events, and the component
//! again without epoch interruption, to price the call deadline; then the
//! built-in itself (contract 0.2: batches carrying only the fields it
//! reads), the same cells, native and WASM, in the same run. Prints the
//! docs/src/benchmarks.md's tables.
//!
//! Run: `cargo bench -p chainsieve --bench filter_matrix`
//!
//! Each cell is the mean time of one `match-batch` call over at least
//! [`MEASURE`] of calls, after a warm-up. The native path runs the SDK's
//! `match_batch` on the same packed bytes the component receives, so the
//! difference is the component boundary (copying the batch in and the
//! matches out, the call) and the code Cranelift generates.
//!
//! A 0.2 component is called as the host calls it, behind its
//! subscriptions' reach (`chainsieve_filters::reach`): asked about the
//! events some key concerns, its every-event subscriptions served by the
//! host. Its cells time that, the native build alone (every event, no
//! reach), and the native build behind the same reach: WASM against the
//! latter is the boundary's cost, against the former what a served call
//! costs next to the matching code on its own.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chainsieve_config::FiltersConfig;
use chainsieve_filter_sdk::layout::{BatchWriter, EventWriter, HeadFields, LogFields, TxFields};
use chainsieve_filter_sdk::projection::ProjectedWriter;
use chainsieve_filter_sdk::{Filter, Matches, Payload, Source, match_batch};
use chainsieve_filters::FilterEngine;
use chainsieve_filters::Layout;
use chainsieve_filters::actor::pairs::delivery_order;
use chainsieve_filters::batch::EventBatch;
use chainsieve_filters::engine::FilterInstance;
use chainsieve_filters::harness::read_events;
use chainsieve_filters::reach::ReachIndex;

const SUBSCRIPTIONS: [u64; 3] = [10, 1_000, 100_000];
const BATCHES: [usize; 3] = [1, 64, 1_024];
/// How long each cell is measured for.
const MEASURE: Duration = Duration::from_millis(300);
/// Cells whose output would exceed this many (event, subscription) pairs are
/// skipped: a broadcast topic at 100,000 subscriptions and 1,024 events
/// answers 10^8 pairs (1.2 GB), which says nothing about the filter.
const MAX_PAIRS: u64 = 10_000_000;

/// The address of subscriber `i`.
fn address(i: u64) -> [u8; 20] {
    let mut a = [0x5a; 20];
    a[..8].copy_from_slice(&i.to_be_bytes());
    a
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One in ten events concerns a subscriber; the rest nobody.
fn concerned(i: u64, subscriptions: u64) -> [u8; 20] {
    if i.is_multiple_of(10) {
        address((i * 7919) % subscriptions)
    } else {
        address(u64::MAX - i)
    }
}

/// A batch of `len` transactions in layout 1.
fn transactions(source: Source, len: usize, subscriptions: u64) -> Vec<u8> {
    write_transactions(BatchWriter::new(source, len), len, subscriptions)
}

/// The same transactions in layout 2, carrying `fields`.
fn projected_transactions(source: Source, fields: u32, len: usize, subscriptions: u64) -> Vec<u8> {
    write_transactions(
        ProjectedWriter::new(source, fields, len),
        len,
        subscriptions,
    )
}

fn write_transactions(mut w: impl EventWriter, len: usize, subscriptions: u64) -> Vec<u8> {
    let input = [0xa9, 0x05, 0x9c, 0xbb, 0, 0, 0, 0];
    for i in 0..len as u64 {
        let from = concerned(i, subscriptions);
        let to = address(u64::MAX / 2 - i);
        w.push_tx(&TxFields {
            hash: &[i as u8; 32],
            from: &from,
            to: Some(&to),
            tx_type: 2,
            value: &[0; 32],
            nonce: i,
            gas: 21_000,
            block_number: 0,
            input: &input,
            removed: false,
        });
    }
    w.finish()
}

/// A batch of `len` headers in layout 1.
fn heads(len: usize) -> Vec<u8> {
    write_heads(BatchWriter::new(Source::Heads, len), len)
}

/// The same headers in layout 2 (headers are whole).
fn projected_heads(len: usize) -> Vec<u8> {
    write_heads(ProjectedWriter::new(Source::Heads, 0, len), len)
}

fn write_heads(mut w: impl EventWriter, len: usize) -> Vec<u8> {
    for i in 0..len as u64 {
        w.push_head(&HeadFields {
            number: i,
            timestamp: 1_700_000_000 + i * 12,
            hash: &[i as u8; 32],
            parent_hash: &[i.wrapping_sub(1) as u8; 32],
            miner: &address(7),
            gas_used: 15_000_000,
            gas_limit: 30_000_000,
            base_fee: 20_000_000_000,
        });
    }
    w.finish()
}

/// A batch of `len` logs in layout 1.
fn logs(len: usize, subscriptions: u64) -> Vec<u8> {
    write_logs(BatchWriter::new(Source::Logs, len), len, subscriptions)
}

/// The same logs in layout 2, carrying `fields`.
fn projected_logs(fields: u32, len: usize, subscriptions: u64) -> Vec<u8> {
    write_logs(
        ProjectedWriter::new(Source::Logs, fields, len),
        len,
        subscriptions,
    )
}

fn write_logs(mut w: impl EventWriter, len: usize, subscriptions: u64) -> Vec<u8> {
    let transfer = [0xdd; 32];
    for i in 0..len as u64 {
        let contract = concerned(i, subscriptions);
        let topics = [transfer, [i as u8; 32], [(i >> 8) as u8; 32]];
        w.push_log(&LogFields {
            address: &contract,
            topics: &topics,
            data: &[0; 32],
            block_number: 1,
            log_index: i as u32,
            transaction_index: (i / 4) as u32,
            transaction_hash: &[i as u8; 32],
            removed: false,
        });
    }
    w.finish()
}

/// A built-in filter under test: its topic, how subscriber `i` subscribes,
/// whether every subscriber gets every event, and its batches.
struct Case {
    topic: &'static str,
    params: fn(u64) -> String,
    broadcast: bool,
    batch: fn(usize, u64) -> Vec<u8>,
    /// The built-in (contract 0.2), if the topic has one.
    v0_2: Option<Build>,
}

/// A contract 0.2 built-in: its file and its batches,
/// carrying the fields its manifest declares.
type Build = (&'static str, fn(u32, usize, u64) -> Vec<u8>);

fn from_address(i: u64) -> String {
    format!(r#"[{{"fromAddress":["0x{}"]}}]"#, hex(&address(i)))
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            topic: "bvPendingTransactions",
            params: from_address,
            broadcast: false,
            batch: |len, subs| transactions(Source::PendingTransactions, len, subs),
            v0_2: Some((
                "chainsieve_bv_pending_transactions_0_2.wasm",
                |fields, len, subs| {
                    projected_transactions(Source::PendingTransactions, fields, len, subs)
                },
            )),
        },
        Case {
            topic: "bvMinedTransactions",
            params: from_address,
            broadcast: false,
            batch: |len, subs| transactions(Source::MinedTransactions, len, subs),
            v0_2: Some((
                "chainsieve_bv_mined_transactions_0_2.wasm",
                |fields, len, subs| {
                    projected_transactions(Source::MinedTransactions, fields, len, subs)
                },
            )),
        },
        Case {
            topic: "newPendingTransactions",
            params: |i| if i % 2 == 0 { "[]" } else { "[true]" }.to_string(),
            broadcast: true,
            batch: |len, subs| transactions(Source::PendingTransactions, len, subs),
            v0_2: Some((
                "chainsieve_new_pending_transactions_filter_0_2.wasm",
                |fields, len, subs| {
                    projected_transactions(Source::PendingTransactions, fields, len, subs)
                },
            )),
        },
        Case {
            topic: "newHeads",
            params: |_| "[]".to_string(),
            broadcast: true,
            batch: |len, _| heads(len),
            v0_2: Some(("chainsieve_new_heads_filter_0_2.wasm", |_, len, _| {
                projected_heads(len)
            })),
        },
        Case {
            topic: "logs",
            params: |i| format!(r#"[{{"address":"0x{}"}}]"#, hex(&address(i))),
            broadcast: false,
            batch: logs,
            v0_2: Some(("chainsieve_logs_filter_0_2.wasm", projected_logs)),
        },
    ]
}

/// Mean time of one call of `f`, in microseconds.
fn time(mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    let start = Instant::now();
    let mut calls = 0u32;
    while start.elapsed() < MEASURE || calls < 10 {
        f();
        calls += 1;
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(calls)
}

/// An instance of the contract 0.1 build of built-in `topic`.
fn instance(engine: &FilterEngine, topic: &str) -> FilterInstance {
    let (file, bytes) = chainsieve_tests::filters::v0_1_build(topic);
    let component = engine.load(file, &bytes).expect("the 0.1 build loads");
    engine.instantiate(&component).expect("instance")
}

/// One cell of the table; `times` is `None` for a skipped cell.
struct Row {
    subscriptions: u64,
    batch: usize,
    times: Option<Times>,
    /// The contract 0.2 build's times, if there is one.
    v0_2: Option<V0_2Times>,
}

/// Microseconds per call of a contract 0.2 build.
struct V0_2Times {
    /// The native build on every event.
    native: f64,
    /// The native build behind the subscriptions' reach.
    native_behind_reach: f64,
    /// The component as the host calls it: behind the reach.
    wasm: f64,
}

/// An answer's pairs in one order: the host serves every-event
/// subscriptions after the component's pairs.
fn sorted(matches: &Matches) -> Vec<(u32, u64)> {
    let mut pairs: Vec<_> = matches.pairs().collect();
    pairs.sort_unstable();
    pairs
}

/// Microseconds per call.
struct Times {
    native: f64,
    wasm: f64,
    /// The component on the engine without epoch interruption.
    wasm_without_deadline: f64,
}

/// Times one filter at every size.
fn measure<F: Filter>(
    case: &Case,
    metered: &Arc<FilterEngine>,
    unmetered: &Arc<FilterEngine>,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for subscriptions in SUBSCRIPTIONS {
        let mut native = F::default();
        let mut wasm = instance(metered, case.topic);
        let mut bare = instance(unmetered, case.topic);
        for i in 0..subscriptions {
            let params = (case.params)(i);
            native.subscribe(i, &params).expect("native subscribe");
            for component in [&mut wasm, &mut bare] {
                component
                    .subscribe(i, &params)
                    .expect("call")
                    .expect("accepted");
            }
        }
        for len in BATCHES {
            if case.broadcast && subscriptions * len as u64 > MAX_PAIRS {
                rows.push(Row {
                    subscriptions,
                    batch: len,
                    times: None,
                    v0_2: None,
                });
                continue;
            }
            let batch = (case.batch)(len, subscriptions);
            let expected = match_batch(&native, &batch).expect("native");
            assert_eq!(wasm.match_batch(&batch, None).expect("wasm"), expected);
            assert_eq!(bare.match_batch(&batch, None).expect("wasm"), expected);
            let native_us = time(|| {
                black_box(match_batch(&native, black_box(&batch)).expect("native"));
            });
            let wasm_us = time(|| {
                black_box(wasm.match_batch(black_box(&batch), None).expect("wasm"));
            });
            let bare_us = time(|| {
                black_box(bare.match_batch(black_box(&batch), None).expect("wasm"));
            });
            rows.push(Row {
                subscriptions,
                batch: len,
                times: Some(Times {
                    native: native_us,
                    wasm: wasm_us,
                    wasm_without_deadline: bare_us,
                }),
                v0_2: None,
            });
        }
    }
    rows
}

/// Times a contract 0.2 build (`file`, native `G`) at the cells `rows`
/// measured, filling in their 0.2 columns; it must answer as the 0.1 build.
fn measure_v0_2<G: chainsieve_filter_sdk_0_2::Filter>(
    case: &Case,
    metered: &Arc<FilterEngine>,
    rows: &mut [Row],
) {
    let Some((file, projected)) = case.v0_2 else {
        return;
    };
    let component = metered
        .load(file, &chainsieve_tests::filters::built(file))
        .expect("the 0.2 built-in loads");
    let Layout::Projected(fields) = component.manifest.layout else {
        panic!("{file} is not a contract 0.2 component");
    };
    for subscriptions in SUBSCRIPTIONS {
        let mut native = G::default();
        let mut reach = ReachIndex::new(component.manifest.source, component.manifest.layout);
        let mut wasm = metered.instantiate(&component).expect("instance");
        let mut v0_1 = instance(metered, case.topic);
        for i in 0..subscriptions {
            let params = (case.params)(i);
            let delivery = native.subscribe(i, &params).expect("native subscribe");
            reach
                .insert(i, native.reach(i), delivery)
                .expect("a usable reach");
            wasm.subscribe(i, &params).expect("call").expect("accepted");
            v0_1.subscribe(i, &params).expect("call").expect("accepted");
        }
        let native_behind_reach = |batch: &[u8]| {
            reach.run(batch, None, |part, _| {
                chainsieve_filter_sdk_0_2::match_batch(&native, part).map_err(anyhow::Error::msg)
            })
        };
        for row in rows
            .iter_mut()
            .filter(|row| row.subscriptions == subscriptions && row.times.is_some())
        {
            let batch = projected(fields, row.batch, subscriptions);
            let expected =
                sorted(&chainsieve_filter_sdk_0_2::match_batch(&native, &batch).expect("native"));
            let whole = (case.batch)(row.batch, subscriptions);
            assert_eq!(
                sorted(&wasm.match_batch(&batch, None).expect("wasm")),
                expected
            );
            assert_eq!(
                sorted(&native_behind_reach(&batch).expect("native")),
                expected
            );
            assert_eq!(
                sorted(&v0_1.match_batch(&whole, None).expect("0.1")),
                expected,
                "0.2 answers as 0.1"
            );
            let native_us = time(|| {
                black_box(
                    chainsieve_filter_sdk_0_2::match_batch(&native, black_box(&batch))
                        .expect("native"),
                );
            });
            let native_behind_reach_us = time(|| {
                black_box(native_behind_reach(black_box(&batch)).expect("native"));
            });
            let wasm_us = time(|| {
                black_box(wasm.match_batch(black_box(&batch), None).expect("wasm"));
            });
            row.v0_2 = Some(V0_2Times {
                native: native_us,
                native_behind_reach: native_behind_reach_us,
                wasm: wasm_us,
            });
        }
    }
}

/// What a delivered notification costs when the host makes its payload
/// from the event (0.1 `erc20Transfers`, the log in the node's shape)
/// against when the component writes it (0.2 `erc20TransfersDecoded`, the
/// decoded transfer, checked by the host): per batch of 1,024 fixture logs,
/// the match call plus one notice per payload (made once per event, shared
/// by its subscribers, as the actor does), on a fresh batch each time so
/// nothing is cached. Prints a second table.
fn payload_costs(metered: &Arc<FilterEngine>) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/events/logs.jsonl");
    let text = std::fs::read_to_string(&fixture).expect("the logs fixture");
    let one_pass = read_events(Source::Logs, &text).expect("fixture events");
    let events: Vec<_> = one_pass.iter().cycle().take(1_024).cloned().collect();
    let load = |file: &str| {
        let bytes = chainsieve_tests::filters::built(file);
        metered.load(file, &bytes).expect("the example loads")
    };
    let fixed = load("chainsieve_example_erc20_transfers.wasm");
    let written = load("chainsieve_example_erc20_transfers_decoded.wasm");
    println!();
    println!("| payload | subscribers | µs per batch | notifications | µs per notification |");
    println!("|---|---:|---:|---:|---:|");
    for subscribers in [1u64, 100] {
        for component in [&fixed, &written] {
            let mut instance = metered.instantiate(component).expect("instance");
            for i in 0..subscribers {
                instance
                    .subscribe(i, "[]")
                    .expect("call")
                    .expect("accepted");
            }
            let mut notifications = 0;
            let us = time(|| {
                let batch = EventBatch::new(Source::Logs, events.clone());
                let matches = instance
                    .match_batch(&component.manifest.layout.of(&batch), None)
                    .expect("match");
                // The actor's path: pairs in delivery order, a written
                // payload's notice made once for all it goes to.
                let (pairs, _) = delivery_order(&matches, &batch);
                for pair in pairs {
                    let notice = pair.written.unwrap_or_else(|| {
                        batch.notice(pair.event as usize, Payload::Full).clone()
                    });
                    black_box(notice);
                }
                notifications = matches.len();
            });
            println!(
                "| {} | {subscribers} | {us:.1} | {notifications} | {:.3} |",
                match component.manifest.layout {
                    Layout::Whole => "fixed (0.1 erc20Transfers, the log)",
                    Layout::Projected(_) => "written (0.2 erc20TransfersDecoded)",
                },
                us / notifications.max(1) as f64
            );
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument picks topics.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let config = FiltersConfig::default();
    let metered = FilterEngine::new(&config).expect("engine");
    let unmetered = FilterEngine::without_deadline(&config).expect("engine");
    println!(
        "| filter | subscriptions | batch | native µs | WASM µs | WASM / native | epoch cost | 0.2 native µs | 0.2 native behind reach µs | 0.2 WASM µs | 0.2 WASM / native behind reach | 0.2 WASM / native |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for case in cases() {
        if !only.is_empty() && !only.iter().any(|o| case.topic.contains(o.as_str())) {
            continue;
        }
        let mut rows = match case.topic {
            "bvPendingTransactions" => {
                measure::<chainsieve_bv_pending_transactions::BvPendingFilter>(
                    &case, &metered, &unmetered,
                )
            }
            "bvMinedTransactions" => measure::<chainsieve_bv_mined_transactions::BvMinedFilter>(
                &case, &metered, &unmetered,
            ),
            "newPendingTransactions" => measure::<
                chainsieve_new_pending_transactions_filter::NewPendingTransactions,
            >(&case, &metered, &unmetered),
            "newHeads" => {
                measure::<chainsieve_new_heads_filter::NewHeads>(&case, &metered, &unmetered)
            }
            _ => measure::<chainsieve_logs_filter::Logs>(&case, &metered, &unmetered),
        };
        match case.topic {
            "bvPendingTransactions" => measure_v0_2::<
                chainsieve_bv_pending_transactions_0_2::BvPendingFilter,
            >(&case, &metered, &mut rows),
            "bvMinedTransactions" => measure_v0_2::<
                chainsieve_bv_mined_transactions_0_2::BvMinedFilter,
            >(&case, &metered, &mut rows),
            "newPendingTransactions" => measure_v0_2::<
                chainsieve_new_pending_transactions_filter_0_2::NewPendingTransactions,
            >(&case, &metered, &mut rows),
            "newHeads" => measure_v0_2::<chainsieve_new_heads_filter_0_2::NewHeads>(
                &case, &metered, &mut rows,
            ),
            _ => measure_v0_2::<chainsieve_logs_filter_0_2::Logs>(&case, &metered, &mut rows),
        }
        for Row {
            subscriptions,
            batch,
            times,
            v0_2,
        } in rows
        {
            let v0_2 = v0_2.map_or("— | — | — | — | —".to_string(), |t| {
                format!(
                    "{:.2} | {:.2} | {:.2} | {:.2}× | {:.2}×",
                    t.native,
                    t.native_behind_reach,
                    t.wasm,
                    t.wasm / t.native_behind_reach,
                    t.wasm / t.native
                )
            });
            match times {
                Some(t) => println!(
                    "| {} | {subscriptions} | {batch} | {:.2} | {:.2} | {:.2}× | {:+.0}% | {v0_2} |",
                    case.topic,
                    t.native,
                    t.wasm,
                    t.wasm / t.native,
                    (t.wasm / t.wasm_without_deadline - 1.0) * 100.0
                ),
                None => println!(
                    "| {} | {subscriptions} | {batch} | — | — | skipped: {} pairs | — | {v0_2} |",
                    case.topic,
                    subscriptions * batch as u64
                ),
            }
        }
    }
    if only.is_empty() || only.iter().any(|o| o == "payloads") {
        payload_costs(&metered);
    }
}
