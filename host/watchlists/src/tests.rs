use tokio_util::sync::CancellationToken;

use super::store::EmbeddedWatchlists;
use super::*;

fn most(watchlists: usize, addresses: usize) -> Most {
    Most {
        watchlists,
        addresses,
        plan: "default".into(),
        watchlists_origin: "watchlists.max_per_key".into(),
        addresses_origin: "watchlists.max_addresses".into(),
    }
}

fn addresses(range: std::ops::Range<u32>) -> Vec<Address> {
    range
        .map(|n| {
            let mut a = [0u8; 20];
            a[16..].copy_from_slice(&n.to_be_bytes());
            a
        })
        .collect()
}

/// A page of the watchlist, as addresses.
fn addresses_of(
    lists: &Watchlists,
    owner: &str,
    name: &str,
    after: Option<Address>,
    limit: usize,
) -> Vec<Address> {
    let page = lists.inspect(owner, name, after, limit).expect("inspect");
    let parsed: Vec<Address> = page
        .addresses
        .iter()
        .map(|a| parse_address(a).expect("hex"))
        .collect();
    parsed
}

async fn service(dir: &std::path::Path) -> (Arc<Watchlists>, Tasks) {
    let stop = CancellationToken::new();
    let tasks = Tasks::new(stop.clone());
    let store = Arc::new(EmbeddedWatchlists::open(Some(dir)).expect("store"));
    let lists = Watchlists::start(store, &tasks, &Queues::default(), stop)
        .await
        .expect("start");
    (lists, tasks)
}

/// Made, filled, emptied and removed; each change numbered after the one
/// before, and what it changed counted.
#[tokio::test]
async fn a_watchlist_is_made_filled_emptied_and_removed() {
    let dir = tempfile::tempdir().expect("dir");
    let (lists, _tasks) = service(dir.path()).await;
    let made = lists
        .create("alice", "users", addresses(0..3), most(5, 10))
        .await
        .expect("create");
    assert_eq!((made.size, made.added, made.edit), (3, 3, 1));
    let added = lists
        .add("alice", "users", addresses(2..6), most(5, 10))
        .await
        .expect("add");
    assert_eq!(
        (added.size, added.added, added.removed, added.edit),
        (6, 3, 0, 2)
    );
    let removed = lists
        .remove("alice", "users", addresses(4..9))
        .await
        .expect("remove");
    assert_eq!((removed.size, removed.removed), (4, 2));
    let handle = lists.handle_of("alice", "users").expect("handle");
    {
        let index = lists.index();
        assert!(index.contains(handle, &addresses(3..4)[0], index.seq()));
        assert!(!index.contains(handle, &addresses(4..5)[0], index.seq()));
    }
    assert_eq!(
        addresses_of(&lists, "alice", "users", None, 10),
        addresses(0..4)
    );
    let cleared = lists.clear("alice", "users").await.expect("clear");
    assert_eq!((cleared.size, cleared.removed), (0, 4));
    assert_eq!(lists.index().addresses(), 0);
    assert_eq!(lists.get("alice", "users").expect("get").size, 0);
    lists.delete("alice", "users").await.expect("delete");
    assert!(matches!(
        lists.get("alice", "users"),
        Err(WatchlistError::NotFound(_))
    ));
    assert!(lists.list("alice").is_empty());
}

/// Another key's watchlist is not found; a name taken, a bad name and
/// each limit are refused with what to change, and a refused edit changes
/// nothing.
#[tokio::test]
async fn refusals_change_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let (lists, _tasks) = service(dir.path()).await;
    lists
        .create("alice", "users", addresses(0..8), most(2, 10))
        .await
        .expect("create");
    assert!(matches!(
        lists.get("bob", "users"),
        Err(WatchlistError::NotFound(_))
    ));
    assert!(matches!(
        lists
            .add("bob", "users", addresses(0..1), most(2, 10))
            .await,
        Err(WatchlistError::NotFound(_))
    ));
    assert!(matches!(
        lists.create("alice", "users", vec![], most(2, 10)).await,
        Err(WatchlistError::Exists(_))
    ));
    let bad = lists
        .create("alice", "a b", vec![], most(2, 10))
        .await
        .expect_err("bad name");
    assert!(bad.to_string().contains("1 to 64 letters"), "{bad}");
    let over = lists
        .add("alice", "users", addresses(5..12), most(2, 10))
        .await
        .expect_err("over");
    let message = over.to_string();
    assert!(
        message.contains("would hold 12 addresses")
            && message.contains("(10, watchlists.max_addresses)"),
        "{message}"
    );
    assert_eq!(
        lists.get("alice", "users").expect("get").size,
        8,
        "nothing changed"
    );
    assert_eq!(
        addresses_of(&lists, "alice", "users", None, 100),
        addresses(0..8)
    );
    lists
        .create("alice", "more", vec![], most(2, 10))
        .await
        .expect("second");
    let third = lists
        .create("alice", "third", vec![], most(2, 10))
        .await
        .expect_err("third");
    assert!(third.to_string().contains("has 2 watchlists"), "{third}");
    let first = lists
        .create("alice", "big", addresses(0..11), most(3, 10))
        .await
        .expect_err("big");
    assert!(matches!(first, WatchlistError::Limit(_)));
    assert!(lists.get("alice", "big").is_err(), "not made");
}

/// Everything comes back after a restart on the same directory, and the
/// numbering goes on from the last edit.
#[tokio::test]
async fn watchlists_survive_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let handle = {
        let (lists, tasks) = service(dir.path()).await;
        lists
            .create("alice", "users", addresses(0..100), most(5, 1_000))
            .await
            .expect("create");
        lists
            .create("bob", "users", addresses(50..60), most(5, 1_000))
            .await
            .expect("create");
        lists
            .remove("alice", "users", addresses(0..10))
            .await
            .expect("remove");
        let handle = lists.handle_of("alice", "users").expect("handle");
        // The editor ends with the service, and lets go of the file.
        drop(lists);
        tasks.close();
        tasks.wait().await;
        handle
    };
    let (lists, _tasks) = service(dir.path()).await;
    assert_eq!(lists.get("alice", "users").expect("alice").size, 90);
    assert_eq!(lists.get("bob", "users").expect("bob").size, 10);
    assert_eq!(lists.handle_of("alice", "users").expect("handle"), handle);
    {
        let index = lists.index();
        assert_eq!(index.seq(), 3);
        assert_eq!(index.addresses(), 90);
        let mut both = Vec::new();
        index.lists_of(&addresses(55..56)[0], index.seq(), |h| both.push(h));
        assert_eq!(both.len(), 2, "an address in two keys' watchlists");
    }
    let next = lists
        .create("carol", "x", vec![], most(5, 10))
        .await
        .expect("create");
    assert_eq!(next.edit, 4);
    assert_ne!(lists.handle_of("carol", "x").expect("handle"), handle);
}

/// A journal gives way to a snapshot once it is twice what it describes,
/// never while it is small.
#[test]
fn compaction_waits_for_a_journal_twice_its_set() {
    assert!(!compaction_due(8 << 20, 0), "8 MB of edits on nothing");
    assert!(compaction_due((8 << 20) + 1, 0));
    assert!(
        !compaction_due(40_000_000, 20_000_000),
        "a million filled once"
    );
    assert!(compaction_due(40_000_001, 20_000_000));
}

/// Emptying and removing a watchlist of many, with edits after: what a
/// restart loads is what was there, whether or not a snapshot was written.
#[tokio::test]
async fn a_compacted_journal_loads_the_same() {
    let dir = tempfile::tempdir().expect("dir");
    {
        let (lists, tasks) = service(dir.path()).await;
        let most = most(5, 1_000_000);
        // 120,000 addresses in three times, out twice: 12 MB of journal
        // over 2.4 MB watched, past the 8 MB floor.
        lists
            .create("alice", "churn", Vec::new(), most.clone())
            .await
            .expect("create");
        for round in 0..3 {
            lists
                .add("alice", "churn", addresses(0..120_000), most.clone())
                .await
                .expect("add");
            if round < 2 {
                lists.clear("alice", "churn").await.expect("clear");
            }
        }
        lists
            .create("alice", "kept", addresses(5..9), most.clone())
            .await
            .expect("create");
        lists.delete("alice", "kept").await.expect("delete");
        lists
            .remove("alice", "churn", addresses(0..10))
            .await
            .expect("remove");
        assert!(
            lists.shared.journal_bytes.load(Ordering::Relaxed) < 3_000_000,
            "a snapshot was written, and the journal started again"
        );
        drop(lists);
        tasks.close();
        tasks.wait().await;
    }
    let (lists, _tasks) = service(dir.path()).await;
    assert_eq!(lists.get("alice", "churn").expect("churn").size, 119_990);
    assert!(lists.get("alice", "kept").is_err());
    let page = addresses_of(&lists, "alice", "churn", None, 3);
    assert_eq!(page, addresses(10..13));
    assert_eq!(lists.index().seq(), 9);
}

/// The index keeps an edit's flips while a view before it is held (a
/// chain's pipeline, a batch in flight), and forgets them once none is.
#[tokio::test]
async fn flips_last_while_a_view_before_them_is_held() {
    let dir = tempfile::tempdir().expect("dir");
    let (lists, _tasks) = service(dir.path()).await;
    let before = lists.view(0);
    let mut edits = lists.edits();
    let made = lists
        .create("alice", "users", addresses(0..5), most(5, 10))
        .await
        .expect("create");
    assert_eq!(*edits.borrow_and_update(), made.edit, "the edit is told");
    let handle = lists.handle_of("alice", "users").expect("handle");
    {
        let index = lists.index();
        assert_eq!(index.unsettled(), 5, "kept for the view before");
        assert!(!index.contains(handle, &addresses(0..1)[0], before.edit()));
        assert!(index.contains(handle, &addresses(0..1)[0], made.edit));
    }
    let after = lists.view(made.edit);
    drop(before);
    lists
        .add("alice", "users", addresses(5..6), most(5, 10))
        .await
        .expect("add");
    assert_eq!(
        lists.index().unsettled(),
        1,
        "the first edit's flips are gone; the second's wait for the view of the first"
    );
    drop(after);
    lists
        .remove("alice", "users", addresses(0..1))
        .await
        .expect("remove");
    assert_eq!(lists.index().unsettled(), 0, "no view is held");
}
