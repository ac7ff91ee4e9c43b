//! The filter hot path: one batch of 1,024 pending transactions matched by
//! `bvPendingTransactions`, through the WebAssembly component (host engine,
//! real WIT call, packed batch) and through the same Rust logic compiled
//! natively, at 1,000 and 100,000 subscriptions. The README reports the
//! ratio.
//!
//! Run: `cargo bench -p chainsieve --bench filter_match`

use chainsieve::config::FiltersConfig;
use chainsieve::filters::FilterEngine;
use chainsieve::filters::registry::builtin_components;
use chainsieve_bv_pending_transactions::BvPendingFilter;
use chainsieve_filter_sdk::layout::{BatchWriter, TxFields};
use chainsieve_filter_sdk::{Filter, Source, match_batch};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const BATCH: usize = 1_024;

/// The address of subscriber `i`.
fn address(i: u64) -> [u8; 20] {
    let mut a = [0x5a; 20];
    a[..8].copy_from_slice(&i.to_be_bytes());
    a
}

/// A batch in which one transaction in ten comes from a subscribed sender.
fn batch(subscriptions: u64) -> Vec<u8> {
    let mut w = BatchWriter::new(Source::PendingTransactions, BATCH);
    let input = [0xa9, 0x05, 0x9c, 0xbb, 0, 0, 0, 0];
    for i in 0..BATCH as u64 {
        let from = if i % 10 == 0 {
            address((i * 7919) % subscriptions)
        } else {
            address(u64::MAX - i)
        };
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

fn params(i: u64) -> String {
    let hex: String = address(i).iter().map(|b| format!("{b:02x}")).collect();
    format!(r#"[{{"fromAddress":["0x{hex}"]}}]"#)
}

fn bench(c: &mut Criterion) {
    let engine = FilterEngine::new(&FiltersConfig::default()).expect("engine");
    let component = builtin_components()
        .iter()
        .map(|(file, bytes)| engine.load(file, bytes).expect("built-in loads"))
        .find(|c| c.manifest.topic == "bvPendingTransactions")
        .expect("bvPendingTransactions is built in");
    let mut group = c.benchmark_group("bvPendingTransactions");
    group.throughput(Throughput::Elements(BATCH as u64));
    for subscriptions in [1_000u64, 100_000] {
        let batch = batch(subscriptions);
        let mut native = BvPendingFilter::default();
        let mut instance = engine.instantiate(&component).expect("instance");
        for i in 0..subscriptions {
            native.subscribe(i, &params(i)).expect("native subscribe");
            instance
                .subscribe(i, &params(i))
                .expect("call")
                .expect("wasm subscribe");
        }
        let expected = match_batch(&native, &batch).expect("native match");
        assert_eq!(
            instance.match_batch(&batch).expect("wasm match"),
            expected,
            "both paths agree"
        );
        assert_eq!(expected.len(), BATCH / 10 + 1);
        group.bench_with_input(
            BenchmarkId::new("native", subscriptions),
            &batch,
            |b, batch| b.iter(|| match_batch(&native, batch).expect("native match")),
        );
        group.bench_with_input(
            BenchmarkId::new("wasm", subscriptions),
            &batch,
            |b, batch| b.iter(|| instance.match_batch(batch).expect("wasm match")),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
