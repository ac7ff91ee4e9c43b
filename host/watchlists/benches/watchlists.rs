//! What a watched address costs (docs/src/benchmarks.md, Watchlists): the
//! index's heap per address at a million addresses, counted by the
//! allocator, and how long an edit of 10,000 addresses takes end to end
//! (checked, committed to `watchlists.redb` on disk, applied), with a
//! million already watched.
//!
//! `cargo bench -p chainsieve-watchlists --bench watchlists`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use chainsieve_runtime::queues::Queues;
use chainsieve_runtime::tasks::Tasks;
use chainsieve_watchlists::store::EmbeddedWatchlists;
use chainsieve_watchlists::{Address, Index, Most, Watchlists};
use tokio_util::sync::CancellationToken;

/// The system allocator, counting the bytes held.
struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HELD.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Addresses as keccak-derived ones look: spread over all their bytes.
fn addresses(from: u64, count: u64) -> Vec<Address> {
    (from..from + count)
        .map(|n| {
            let mut state = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xd1b5_4a32_d192_ed03;
            let mut address = [0u8; 20];
            for chunk in address.chunks_mut(8) {
                state ^= state >> 31;
                state = state.wrapping_mul(0xbf58_476d_1ce4_e5b9);
                chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
            }
            address
        })
        .collect()
}

fn main() {
    // Memory: the index alone, a million addresses in 100 watchlists of
    // 10,000 (as a service fills it: edit by edit, every reader caught up).
    for size in [1_000_000u64, 900_000] {
        let before = HELD.load(Ordering::Relaxed);
        let mut index = Index::default();
        for (edit, start) in (0..size).step_by(10_000).enumerate() {
            let batch = addresses(start, 10_000.min(size - start));
            let seq = edit as u64 + 1;
            index.apply(seq, (edit % 100) as u32 + 1, &batch, &[]);
            index.settle(seq);
        }
        let held = HELD.load(Ordering::Relaxed) - before;
        println!(
            "index: {size} addresses, {:.1} MB, {:.1} bytes per address",
            held as f64 / 1e6,
            held as f64 / size as f64
        );
        drop(index);
    }

    // Edits: a service on a data directory with a million addresses, then
    // edits of 10,000 new ones, 10,000 removed.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("dir");
        let stop = CancellationToken::new();
        let tasks = Tasks::new(stop.clone());
        let store = Arc::new(EmbeddedWatchlists::open(Some(dir.path())).expect("store"));
        let lists = Watchlists::start(store, &tasks, &Queues::default(), stop)
            .await
            .expect("start");
        let most = Most {
            watchlists: 10,
            addresses: 2_000_000,
            plan: "bench".into(),
            watchlists_origin: String::new(),
            addresses_origin: String::new(),
        };
        lists
            .create("bench", "users", Vec::new(), most.clone())
            .await
            .expect("create");
        let fill = Instant::now();
        for start in (0..1_000_000).step_by(10_000) {
            lists
                .add("bench", "users", addresses(start, 10_000), most.clone())
                .await
                .expect("fill");
        }
        println!("filled 1,000,000 in {:.2} s", fill.elapsed().as_secs_f64());
        let mut adds = Vec::new();
        let mut removes = Vec::new();
        for round in 0..9u64 {
            let batch = addresses(2_000_000 + round * 10_000, 10_000);
            let at = Instant::now();
            let applied = lists
                .add("bench", "users", batch.clone(), most.clone())
                .await
                .expect("add");
            adds.push(at.elapsed().as_secs_f64() * 1e3);
            assert_eq!(applied.added, 10_000);
            let at = Instant::now();
            lists.remove("bench", "users", batch).await.expect("remove");
            removes.push(at.elapsed().as_secs_f64() * 1e3);
        }
        for (what, mut times) in [("add", adds), ("remove", removes)] {
            times.sort_by(f64::total_cmp);
            println!(
                "{what} 10,000 of 1,000,000: median {:.1} ms ({:.1}-{:.1}) over {}",
                times[times.len() / 2],
                times[0],
                times[times.len() - 1],
                times.len()
            );
        }
    });
}
