//! What following transactions' lives costs a chain's pipeline
//! (docs/src/benchmarks.md, Lifecycle): the tracker's turns of the devnet's
//! pending batches and blocks (200 transactions a block), each block's
//! finality two blocks deep, per transaction seen; the median of seven
//! runs over the same chain, with the spread.
//!
//! `cargo bench -p chainsieve-chain --bench lifecycle`

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Instant;

use chainsieve_chain::lifecycle::{Tracker, TrackerSettings};
use chainsieve_ingest::devnet::{Devnet, DevnetSettings};
use chainsieve_model::{Block, Grade, SourceEvent, Transaction};

/// Blocks of the chain each run follows.
const BLOCKS: usize = 256;

const RUNS: usize = 7;

/// What the devnet announced and mined, in order.
enum Seen {
    Pending(Vec<Arc<Transaction>>),
    Mined(Arc<Block>),
}

fn chain() -> Vec<Seen> {
    let mut devnet = Devnet::new(
        1,
        &DevnetSettings {
            transactions_per_block: 200,
            ..DevnetSettings::default()
        },
    );
    let mut seen = Vec::new();
    let mut blocks = 0;
    while blocks < BLOCKS {
        for event in devnet.next_step() {
            match event {
                SourceEvent::Pending { txs, .. } => seen.push(Seen::Pending(txs)),
                SourceEvent::Block(block) => {
                    blocks += 1;
                    seen.push(Seen::Mined(block));
                }
                _ => {}
            }
        }
    }
    seen
}

fn main() {
    let seen = chain();
    let transactions: usize = seen
        .iter()
        .map(|s| match s {
            Seen::Pending(txs) => txs.len(),
            Seen::Mined(block) => block.transactions.len(),
        })
        .sum();
    let settings = TrackerSettings {
        max_pending: NonZeroUsize::new(100_000).expect("not zero"),
        keep_blocks: 300,
        drop_after_ms: 300_000,
    };
    let mut per_tx = Vec::new();
    let mut turns = 0;
    for _ in 0..RUNS {
        let mut tracker = Tracker::new(settings);
        turns = 0;
        let started = Instant::now();
        for (at, step) in seen.iter().enumerate() {
            turns += match step {
                Seen::Pending(txs) => tracker.pending(txs, None, at as u64).len(),
                Seen::Mined(block) => {
                    let mut told = tracker.added(block, at as u64).len();
                    let deep = block.number().saturating_sub(2);
                    told += tracker.finality(Grade::Finalized, deep).len();
                    told
                }
            };
        }
        per_tx.push(started.elapsed().as_nanos() as f64 / transactions as f64);
    }
    per_tx.sort_by(f64::total_cmp);
    println!(
        "{BLOCKS} blocks, {transactions} transactions seen (pending and mined), {turns} turns a run"
    );
    println!(
        "tracker: {:.0} ns a transaction seen (median of {RUNS}; {:.0}-{:.0})",
        per_tx[RUNS / 2],
        per_tx[0],
        per_tx[RUNS - 1]
    );
}
