//! What a watchlist costs matching (docs/src/benchmarks.md, Watchlists):
//! the built-in `bvMinedTransactions` component (contract 0.3) with
//! 10,000 subscriptions, each naming one of 100 watchlists in
//! `fromAddress`, matching batches of 1,024 transactions of which 10 come
//! from watched addresses; the watchlists hold 1,000,000 addresses in all,
//! then 1,000. A call's cost is the host's narrowing (one index probe per
//! sender) plus the component's call on the transactions that hit; it
//! should not grow with the watchlists' size.
//!
//! `cargo bench -p chainsieve --bench watchlist_matching`

use std::hint::black_box;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use chainsieve_config::FiltersConfig;
use chainsieve_filter_sdk::Source;
use chainsieve_filter_sdk::layout::TxFields;
use chainsieve_filter_sdk::projection::{ProjectedWriter, tx_fields};
use chainsieve_filters::{FilterEngine, FilterRegistry};
use chainsieve_watchlists::Index;
use chainsieve_watchlists::views::Views;

const SUBSCRIPTIONS: u32 = 10_000;
const WATCHLISTS: u32 = 100;
const BATCH: usize = 1_024;
const WATCHED_PER_BATCH: usize = 10;
const ROUNDS: usize = 400;

/// Addresses spread over all their bytes, as real ones are.
fn address(n: u64) -> [u8; 20] {
    let mut state = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xd1b5_4a32_d192_ed03;
    let mut address = [0u8; 20];
    for chunk in address.chunks_mut(8) {
        state ^= state >> 31;
        state = state.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    address
}

/// Median microseconds of one call, with `per_list` addresses in each
/// watchlist.
fn run(per_list: u64) -> f64 {
    let config = FiltersConfig {
        dir: std::env::temp_dir().join("chainsieve-no-filters-dir"),
        ..FiltersConfig::default()
    };
    let engine = FilterEngine::new(&config).expect("engine");
    let registry = FilterRegistry::load(&engine, &config.dir).expect("built-ins");
    let component = registry
        .active()
        .remove("bvMinedTransactions")
        .expect("the built-in");
    assert_eq!(component.version, "0.3.0");
    let mut instance = engine.instantiate(&component).expect("an instance");
    for id in 0..u64::from(SUBSCRIPTIONS) {
        let params = format!(
            r#"[{{"fromAddress":{{"watchlist":{}}}}}]"#,
            id % u64::from(WATCHLISTS)
        );
        instance
            .subscribe(id, &params)
            .expect("a call")
            .expect("accepted");
    }
    let mut index = Index::default();
    for list in 0..u64::from(WATCHLISTS) {
        let addresses: Vec<[u8; 20]> = (0..per_list)
            .map(|i| address(list * per_list + i))
            .collect();
        index.apply(list + 1, list as u32, &addresses, &[]);
        index.settle(list + 1);
    }
    let edit = index.seq();
    let views = Arc::new(Views::new(Arc::new(RwLock::new(index))));
    let view = views.view(edit);
    let fields = tx_fields::FROM | tx_fields::TO | tx_fields::SELECTOR;
    let total = u64::from(WATCHLISTS) * per_list;
    let batches: Vec<Vec<u8>> = (0..8u64)
        .map(|b| {
            let mut w = ProjectedWriter::new(Source::MinedTransactions, fields, BATCH);
            for i in 0..BATCH as u64 {
                let watched = (i as usize) < WATCHED_PER_BATCH;
                let from = if watched {
                    address((b * 7919 + i * 104_729) % total)
                } else {
                    address(u64::MAX / 2 - b * 10_000 - i)
                };
                let to = address(u64::MAX / 3 - i);
                w.push_tx(&TxFields::call(&from, Some(&to), &[0xa9, 0x05, 0x9c, 0xbb]));
            }
            w.finish()
        })
        .collect();
    let matched = instance
        .match_batch(&batches[0], Some(&view))
        .expect("matches");
    assert_eq!(
        matched.len(),
        WATCHED_PER_BATCH * (SUBSCRIPTIONS / WATCHLISTS) as usize,
        "each watched sender reaches its watchlist's subscriptions"
    );
    let mut times = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let batch = &batches[round % batches.len()];
        let started = Instant::now();
        black_box(
            instance
                .match_batch(black_box(batch), Some(&view))
                .expect("matches"),
        );
        times.push(started.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let million = run(10_000);
    let thousand = run(10);
    println!(
        "10,000 subscriptions, 1,024-transaction batches, {WATCHED_PER_BATCH} watched senders each: \
         1,000,000 addresses {million:.1} us a call, 1,000 addresses {thousand:.1} us, ratio {:.2}",
        million / thousand
    );
}
