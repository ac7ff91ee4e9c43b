//! Isolation: components that loop forever, grow memory without bound or
//! panic are stopped by the call deadline, the memory cap and the trap;
//! one that keeps failing is disabled, its subscriptions ended with a
//! reason; one that fails once is rebuilt with its subscriptions replayed;
//! and every other topic and chain keeps serving throughout.

use std::collections::{BTreeMap, BTreeSet};

use chainsieve_filters::actor::DISABLE_AFTER;
use chainsieve_tests::filters::{evil_filter, place, watching};
use chainsieve_tests::{TestServer, WsClient};
use serde_json::{Value, json};

fn number(head: &Value) -> u64 {
    chainsieve_tests::quantity(&head["number"])
}

/// Asserts `numbers` are consecutive blocks, each once.
fn assert_consecutive(numbers: &[u64], what: &str) {
    assert!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "{what}: {numbers:?}"
    );
}

/// What the eth connection received: the subscriptions ended (with their
/// reason), and the heads of `newHeads` and of the well-behaved evilOnce
/// subscription.
#[derive(Debug, Default)]
struct Seen {
    ended: BTreeMap<String, String>,
    head_numbers: Vec<u64>,
    survivor_numbers: Vec<u64>,
}

impl Seen {
    /// Takes one notification's `params`.
    fn observe(&mut self, params: &Value, heads: &str, survivor: &str) {
        let subscription = params["subscription"].as_str().expect("id").to_string();
        if let Some(error) = params.get("error") {
            assert_eq!(error["code"], json!(-32000), "{params}");
            let message = error["message"].as_str().expect("message").to_string();
            assert!(
                self.ended.insert(subscription, message).is_none(),
                "ended twice: {params}"
            );
            return;
        }
        let result = &params["result"];
        if subscription == heads {
            self.head_numbers.push(number(result));
        } else if subscription == survivor {
            self.survivor_numbers.push(number(result));
        } else {
            assert!(
                !self.ended.contains_key(&subscription),
                "a notification after the end: {params}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misbehaving_filters_are_stopped_and_everything_else_keeps_serving() {
    let dir = tempfile::tempdir().expect("temp dir");
    for topic in ["evilLoop", "evilGrow", "evilPanic", "evilOnce"] {
        place(
            dir.path(),
            &format!("{topic}.wasm"),
            &evil_filter(&json!({"topic": topic, "source": "heads"})),
        );
    }
    let mut config = watching(dir.path());
    config.filters.call_timeout_ms = 200;
    config.filters.memory_limit_mib = 32;
    let server = TestServer::started(config).await;
    let mut eth = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let mut bsc = WsClient::connect(&server.ws_url("bsc", "demo"))
        .await
        .expect("connect");
    let bsc_heads = bsc.subscribe(json!(["newHeads"])).await.expect("bsc heads");

    let heads = eth.subscribe(json!(["newHeads"])).await.expect("heads");
    let looping = eth
        .subscribe(json!(["evilLoop", {"do": "loop"}]))
        .await
        .expect("loop");
    let growing = eth
        .subscribe(json!(["evilGrow", {"do": "grow"}]))
        .await
        .expect("grow");
    let panicking = eth
        .subscribe(json!(["evilPanic", {"do": "panic"}]))
        .await
        .expect("panic");
    let survivor = eth.subscribe(json!(["evilOnce"])).await.expect("evilOnce");

    // The poison must reach the evilOnce actor before its block's batch
    // does. The actor queues a subscription's response in order with its
    // notifications, so survivor heads read before the poison's response
    // are the batches it handled before the poison existed: if one of them
    // is already the poison block (or past it), the poison came too late
    // (a loaded machine), and a later block is tried.
    let mut seen = Seen::default();
    let mut tries = 0;
    let poison_block = loop {
        tries += 1;
        assert!(tries <= 5, "no poison subscription was in time: {seen:?}");
        let current = eth
            .call("eth_blockNumber", json!([]))
            .await
            .expect("block number");
        let now = chainsieve_tests::quantity(&current["result"])
            .max(seen.survivor_numbers.last().copied().unwrap_or(0));
        let poison_block = now + 3;
        let poison = eth
            .subscribe(json!(["evilOnce", {"do": "panic", "at_block": poison_block}]))
            .await
            .expect("evilOnce poison");
        for _ in 0..eth.buffered_notifications() {
            let params = eth.next_notification_params().await.expect("buffered");
            seen.observe(&params, &heads, &survivor);
        }
        if seen
            .survivor_numbers
            .last()
            .is_none_or(|&n| n < poison_block)
        {
            break poison_block;
        }
        let gone = eth
            .call("eth_unsubscribe", json!([poison]))
            .await
            .expect("unsubscribe");
        assert_eq!(gone["result"], json!(true), "{gone}");
    };

    // Read until the three broken topics have ended and the one-off
    // failure is well behind.
    while seen.ended.len() < 3
        || seen
            .survivor_numbers
            .last()
            .is_none_or(|&n| n < poison_block + 3)
    {
        let params = eth.next_notification_params().await.expect("notification");
        seen.observe(&params, &heads, &survivor);
    }
    let Seen {
        ended,
        head_numbers,
        survivor_numbers,
    } = seen;
    let reason = |id: &str| ended.get(id).cloned().unwrap_or_default();
    let in_a_row = format!("{DISABLE_AFTER} calls in a row failed");
    assert!(
        reason(&looping).contains("evilLoop filter was disabled")
            && reason(&looping).contains(&in_a_row)
            && reason(&looping).contains("deadline of 200 ms"),
        "{}",
        reason(&looping)
    );
    assert!(
        reason(&growing).contains(&in_a_row) && reason(&growing).contains("memory cap of 32 MiB"),
        "{}",
        reason(&growing)
    );
    assert!(
        reason(&panicking).contains(&in_a_row) && reason(&panicking).contains("unreachable"),
        "{}",
        reason(&panicking)
    );

    // The one-off failure cost the batch of the poison block only: the
    // instance was rebuilt with both subscriptions replayed.
    let before: Vec<u64> = survivor_numbers
        .iter()
        .copied()
        .filter(|&n| n < poison_block)
        .collect();
    let after: Vec<u64> = survivor_numbers
        .iter()
        .copied()
        .filter(|&n| n > poison_block)
        .collect();
    assert!(!survivor_numbers.contains(&poison_block));
    assert_consecutive(&before, "evilOnce before the failure");
    assert_consecutive(&after, "evilOnce after the failure");
    assert_eq!(after.first(), Some(&(poison_block + 1)));
    let once = server.state.chains["eth"]
        .filter("evilOnce")
        .expect("evilOnce")
        .status();
    assert_eq!((once.failures, once.disabled), (1, None));

    // newHeads on the same chain and on another never missed a block.
    assert_consecutive(&head_numbers, "eth newHeads");
    assert!(head_numbers.len() >= 4, "{head_numbers:?}");
    let mut bsc_numbers = Vec::new();
    for _ in 0..4 {
        let (subscription, head) = bsc.next_notification().await.expect("bsc head");
        assert_eq!(subscription, bsc_heads);
        bsc_numbers.push(number(&head));
    }
    assert_consecutive(&bsc_numbers, "bsc newHeads");

    // A disabled topic refuses new subscriptions, saying why; its status
    // says so too.
    let refused = eth
        .call("eth_subscribe", json!(["evilLoop"]))
        .await
        .expect("call");
    assert_eq!(refused["error"]["code"], json!(-32603), "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("evilLoop filter is disabled")),
        "{refused}"
    );
    for topic in ["evilLoop", "evilGrow", "evilPanic"] {
        let status = server.state.chains["eth"]
            .filter(topic)
            .expect("still listed")
            .status();
        assert_eq!(status.failures, u64::from(DISABLE_AFTER), "{topic}");
        assert!(status.disabled.is_some(), "{topic}");
    }
    let unaffected: BTreeSet<u64> = ["bsc", "polygon"]
        .iter()
        .map(|chain| {
            server.state.chains[*chain]
                .filter("evilLoop")
                .expect("listed")
                .status()
                .failures
        })
        .collect();
    assert_eq!(unaffected, BTreeSet::from([0]), "other chains' instances");
}
