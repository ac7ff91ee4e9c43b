//! The ledger without a server: flushes into hourly buckets, a refused
//! flush tried again, the unflushed counts in a query, buckets kept across
//! a reopen and forgotten past the retention.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

const H: u64 = 1_800_000_000 - 1_800_000_000 % HOUR;

/// The embedded store, refusing writes while `failing`.
#[derive(Debug)]
struct Flaky {
    local: EmbeddedUsage,
    failing: AtomicBool,
}

impl UsageStore for Flaky {
    fn record(&self, flushes: Vec<Flush>) -> BoxFuture<'_, anyhow::Result<()>> {
        if self.failing.load(Ordering::Relaxed) {
            return Box::pin(async { Err(anyhow::anyhow!("the store is down")) });
        }
        self.local.record(flushes)
    }

    fn read(
        &self,
        id: String,
        from: u64,
        to: u64,
    ) -> BoxFuture<'_, anyhow::Result<BTreeMap<u64, Counts>>> {
        self.local.read(id, from, to)
    }
}

fn ledger(store: Arc<dyn UsageStore>) -> Arc<Ledger> {
    Ledger::spawn(
        store,
        Box::new(Vec::new),
        Duration::from_secs(3_600),
        TaskTracker::new(),
        &chainsieve_runtime::tasks::Tasks::new(CancellationToken::new()),
        CancellationToken::new(),
    )
}

#[tokio::test]
async fn flushes_fill_hourly_buckets_and_a_refused_one_is_tried_again() {
    let store = Arc::new(Flaky {
        local: EmbeddedUsage::open(None, Duration::from_secs(90 * 86_400)).expect("store"),
        failing: AtomicBool::new(false),
    });
    let ledger = ledger(store.clone());
    let meter = Arc::new(Meter::default());
    let meters = [(Arc::<str>::from("key_a"), meter.clone())];
    let (_, connection) = crate::meter::attached(&meter);

    meter.called("eth_call");
    connection.add(3, 300);
    ledger.flush(&meters, H + 10).await.expect("flushed");
    meter.called("eth_call");
    ledger.flush(&meters, H + 20).await.expect("flushed");
    // The next hour; its first flush refused, then tried again.
    connection.add(1, 100);
    store.failing.store(true, Ordering::Relaxed);
    ledger
        .flush(&meters, H + HOUR + 5)
        .await
        .expect_err("refused");
    store.failing.store(false, Ordering::Relaxed);
    meter.replayed(2);
    ledger.flush(&meters, H + HOUR + 15).await.expect("flushed");
    ledger
        .flush(&meters, H + HOUR + 25)
        .await
        .expect("nothing new");

    let hours = store.read("key_a".into(), H, H + HOUR).await.expect("read");
    assert_eq!(hours.len(), 2, "{hours:?}");
    let first = &hours[&H];
    assert_eq!(first.calls["eth_call"], 2);
    assert_eq!((first.notifications, first.bytes), (3, 300));
    let second = &hours[&(H + HOUR)];
    assert_eq!(
        (second.notifications, second.bytes, second.history_blocks),
        (1, 100, 2),
        "the refused flush's counts came with the next"
    );
    assert!(second.calls.is_empty());

    // A query adds what is not flushed yet, in the current hour.
    meter.called("net_version");
    let now = hour_of(chainsieve_runtime::clock::unix_now());
    let usage = ledger
        .usage("key_a", &meter, now, now + HOUR)
        .await
        .expect("usage");
    assert_eq!(usage[&now].calls["net_version"], 1, "{usage:?}");
    assert!(
        store
            .read("key_b".into(), H, H + HOUR)
            .await
            .expect("read")
            .is_empty(),
        "another key's buckets are its own"
    );
}

#[tokio::test]
async fn buckets_survive_a_reopen_and_old_ones_are_forgotten() {
    let dir = tempfile::tempdir().expect("temp dir");
    let retention = Duration::from_secs(2 * HOUR);
    let flush = |hour: u64, notifications: u64| Flush {
        id: "key_a".into(),
        hour,
        delta: Counts {
            notifications,
            ..Counts::default()
        },
        this_process: Counts::default(),
    };
    {
        let store = EmbeddedUsage::open(Some(dir.path()), retention).expect("open");
        store.record(vec![flush(H, 1)]).await.expect("written");
        store.record(vec![flush(H, 2)]).await.expect("added");
    }
    let store = EmbeddedUsage::open(Some(dir.path()), retention).expect("reopen");
    let hours = store.read("key_a".into(), H, H).await.expect("read");
    assert_eq!(hours[&H].notifications, 3);
    store
        .record(vec![flush(H + 3 * HOUR, 1)])
        .await
        .expect("written");
    let hours = store
        .read("key_a".into(), H, H + 3 * HOUR)
        .await
        .expect("read");
    assert_eq!(
        hours.keys().copied().collect::<Vec<_>>(),
        vec![H + 3 * HOUR],
        "older than the retention: gone"
    );
}

#[test]
fn a_range_is_checked() {
    assert!(check_range(H, H + HOUR).is_ok());
    assert!(
        check_range(H + 1, H)
            .expect_err("backwards")
            .contains("after")
    );
    assert!(check_range(0, MAX_HOURS * HOUR + 2 * HOUR).is_err());
}
