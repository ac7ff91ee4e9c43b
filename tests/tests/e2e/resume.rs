//! Resumable subscriptions on the devnet: a client whose socket dies
//! mid-stream reconnects with the cursor of the last notification it got
//! and, for every topic, what both connections received is exactly what an
//! uninterrupted subscription received, in order, across a reorg that
//! happened while it was away. Bad resumes are refused with their codes.

use std::collections::BTreeMap;

use chainsieve_config::{Config, LogConfig, Span};
use chainsieve_eventlog::cursor::Cursor;
use chainsieve_ingest::devnet::DevnetSettings;
use chainsieve_tests::filters::{built, place, watching};
use chainsieve_tests::{TIMEOUT, TestServer, WsClient, fast_devnet, hex_address, quantity};
use serde_json::{Value, json};

/// A notification as both connections must agree on it.
#[derive(Clone, Debug, PartialEq)]
struct Delivered {
    result: Value,
    cursor: String,
}

impl Delivered {
    fn of(params: &Value) -> Self {
        Self {
            result: params["result"].clone(),
            cursor: params["cursor"]
                .as_str()
                .unwrap_or_else(|| panic!("every notification carries a cursor: {params}"))
                .to_string(),
        }
    }

    /// Where the cursor points: the log position and the event's index in
    /// that step.
    fn mark(&self) -> (u64, u64) {
        let cursor: Cursor = self
            .cursor
            .parse()
            .unwrap_or_else(|malformed| panic!("{malformed}"));
        (
            cursor.position.expect("a logged event"),
            u64::from(cursor.index),
        )
    }

    fn position(&self) -> u64 {
        self.mark().0
    }
}

/// Every topic, built-in and custom, with parameters.
fn topics(token: &str) -> Vec<(&'static str, Vec<Value>)> {
    vec![
        ("logs", vec![json!({"address": token})]),
        ("newHeads", vec![]),
        ("bvMinedTransactions", vec![]),
        ("newPendingTransactions", vec![json!(true)]),
        ("erc20Transfers", vec![json!({"tokens": [token]})]),
    ]
}

/// Subscribes to every topic (with `options` appended to its params, if
/// any); returns subscription id → topic.
async fn subscribe_all(
    ws: &mut WsClient,
    token: &str,
    options: impl Fn(&str) -> Option<Value>,
) -> BTreeMap<String, &'static str> {
    let mut ids = BTreeMap::new();
    for (topic, params) in topics(token) {
        let mut call = vec![json!(topic)];
        call.extend(params);
        call.extend(options(topic));
        let id = ws.subscribe(Value::Array(call)).await.expect("subscribed");
        ids.insert(id, topic);
    }
    ids
}

/// Files a notification's `params` under its topic (subscription id →
/// topic in `ids`) in `into`; returns the topic.
fn file(
    params: &Value,
    ids: &BTreeMap<String, &'static str>,
    into: &mut BTreeMap<&'static str, Vec<Delivered>>,
) -> &'static str {
    let topic = ids[params["subscription"].as_str().expect("an id")];
    into.entry(topic).or_default().push(Delivered::of(params));
    topic
}

/// Reads `ws`'s next notification and files it; returns its topic.
async fn read_one(
    ws: &mut WsClient,
    ids: &BTreeMap<String, &'static str>,
    into: &mut BTreeMap<&'static str, Vec<Delivered>>,
) -> &'static str {
    let params = ws.next_notification_params().await.expect("notifications");
    file(&params, ids, into)
}

/// The next notification a forwarded connection received.
async fn next_forwarded(feed: &mut tokio::sync::mpsc::UnboundedReceiver<Value>) -> Value {
    tokio::time::timeout(TIMEOUT, feed.recv())
        .await
        .expect("notifications in time")
        .expect("the connection is open")
}

/// Reads `ws` until every topic has at least `each` more notifications in
/// `into`.
async fn read_until_each(
    ws: &mut WsClient,
    ids: &BTreeMap<String, &'static str>,
    into: &mut BTreeMap<&'static str, Vec<Delivered>>,
    each: usize,
) {
    let mut fresh: BTreeMap<&str, usize> = ids.values().map(|t| (*t, 0)).collect();
    while fresh.values().any(|n| *n < each) {
        let topic = read_one(ws, ids, into).await;
        *fresh.get_mut(topic).expect("a topic") += 1;
    }
}

/// A `newHeads` subscription on `chain` of `server`, read until the chain
/// reached block 4; returns the client, the subscription and that head's
/// number.
async fn heads_from_block_four(server: &TestServer, chain: &str) -> (WsClient, String, u64) {
    let mut ws = WsClient::connect(&server.ws_url(chain, "demo"))
        .await
        .expect("connect");
    let live = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    let mut now = 0;
    while now < 4 {
        let (_, head) = ws.next_notification().await.expect("a head");
        now = quantity(&head["number"]);
    }
    (ws, live, now)
}

/// A config with the example `erc20Transfers` component (in the
/// directory returned, kept as long as the server runs), a devnet that
/// reorganises every `reorg_every` blocks (0: never) up to three deep, and
/// a log of `blocks`.
fn config(blocks: usize, reorg_every: u64) -> (Config, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let example = "chainsieve_example_erc20_transfers.wasm";
    place(dir.path(), example, &built(example));
    let config = Config {
        devnet: DevnetSettings {
            reorg_every,
            reorg_depth: 3,
            ..fast_devnet()
        },
        log: LogConfig {
            window: Span::Blocks(blocks as u64),
            ..LogConfig::default()
        },
        ..watching(dir.path())
    };
    (config, dir)
}

/// A server on [`config`]'s chain (reorganising every 4 blocks), its first
/// known token, and a control connection subscribed to every topic.
struct Scene {
    server: TestServer,
    _dir: tempfile::TempDir,
    token: String,
    url: String,
    control: WsClient,
    /// The control's subscription ids, to their topics.
    control_ids: BTreeMap<String, &'static str>,
}

impl Scene {
    async fn start() -> Self {
        let (config, _dir) = config(1_024, 4);
        let server = TestServer::started(config).await;
        let token = hex_address(&chainsieve_ingest::devnet::known_tokens(1)[0].address);
        let url = server.ws_url("eth", "demo");
        let mut control = WsClient::connect(&url).await.expect("connect");
        let control_ids = subscribe_all(&mut control, &token, |_| None).await;
        Self {
            server,
            _dir,
            token,
            url,
            control,
            control_ids,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_topic_resumes_exactly_across_a_reorg() {
    let Scene {
        server: _server,
        _dir,
        token,
        url,
        control,
        control_ids,
    } = Scene::start().await;
    // The control never leaves: it is read by a task of its own throughout.
    let mut control_feed = control.forward_notifications();
    let mut controlled: BTreeMap<&'static str, Vec<Delivered>> = BTreeMap::new();

    let mut first = WsClient::connect(&url).await.expect("connect");
    let first_ids = subscribe_all(&mut first, &token, |_| None).await;
    let mut got: BTreeMap<&'static str, Vec<Delivered>> = BTreeMap::new();
    read_until_each(&mut first, &first_ids, &mut got, 2).await;
    // The socket dies mid-stream, in the middle of a block's transactions:
    // no close frame, notifications in flight.
    while !(1..=8).contains(&got["bvMinedTransactions"].last().expect("some").mark().1) {
        read_one(&mut first, &first_ids, &mut got).await;
    }
    drop(first);
    let last: BTreeMap<&'static str, String> = got
        .iter()
        .map(|(topic, delivered)| (*topic, delivered.last().expect("some").cursor.clone()))
        .collect();
    let away_from = got["newHeads"].last().expect("a head").position();

    // Away until the chain reorganised: the control sees a head that is not
    // above the one before it, then two more.
    let mut previous: Option<u64> = None;
    let mut after_reorg: Option<usize> = None;
    while after_reorg.is_none_or(|n| n < 2) {
        let params = next_forwarded(&mut control_feed).await;
        let topic = file(&params, &control_ids, &mut controlled);
        let delivered = Delivered::of(&params);
        if topic == "newHeads" && delivered.position() > away_from {
            let number = quantity(&delivered.result["number"]);
            match after_reorg.as_mut() {
                Some(n) => *n += 1,
                None if previous.is_some_and(|p| number <= p) => after_reorg = Some(0),
                None => {}
            }
            previous = Some(number);
        }
    }

    let mut second = WsClient::connect(&url).await.expect("reconnect");
    let second_ids = subscribe_all(&mut second, &token, |topic| {
        Some(json!({"resumeFrom": last[topic]}))
    })
    .await;
    let mut resumed: BTreeMap<&'static str, Vec<Delivered>> = BTreeMap::new();
    read_until_each(&mut second, &second_ids, &mut resumed, 3).await;
    // Well past the seam where the replay joined the live batches: two
    // blocks (five steps each) after the control's last step when the
    // client came back.
    let back_at = controlled
        .values()
        .filter_map(|c| c.last())
        .map(Delivered::position)
        .max()
        .expect("the control got something");
    while resumed["newHeads"].last().expect("some").position() <= back_at + 10 {
        read_one(&mut second, &second_ids, &mut resumed).await;
    }

    // The control must have caught up with the resumed connection on every
    // topic before comparing.
    let behind = |controlled: &BTreeMap<&str, Vec<Delivered>>| {
        resumed.iter().any(|(topic, delivered)| {
            let last = delivered.last().expect("some").mark();
            controlled
                .get(topic)
                .and_then(|c| c.last())
                .is_none_or(|c| c.mark() < last)
        })
    };
    while behind(&controlled) {
        let params = next_forwarded(&mut control_feed).await;
        file(&params, &control_ids, &mut controlled);
    }

    let mut removed = 0;
    for (topic, _) in topics(&token) {
        let mut union = got[topic].clone();
        union.extend(resumed[topic].iter().cloned());
        // Each actor delivers in log order, so both streams are complete
        // up to the last position either received.
        let upto = union
            .last()
            .expect("some")
            .mark()
            .min(controlled[topic].last().expect("some").mark());
        let union: Vec<&Delivered> = union.iter().filter(|d| d.mark() <= upto).collect();
        let start = controlled[topic]
            .iter()
            .position(|d| d.cursor == union[0].cursor)
            .unwrap_or_else(|| {
                panic!("{topic}: the control saw the first connection's first event")
            });
        let control: Vec<&Delivered> = controlled[topic][start..]
            .iter()
            .filter(|d| d.mark() <= upto)
            .collect();
        assert!(
            union.len() > got[topic].len(),
            "{topic}: the comparison reaches past the reconnect"
        );
        let cursors = |events: &[&Delivered]| -> Vec<String> {
            events.iter().map(|d| d.cursor.clone()).collect()
        };
        assert_eq!(
            cursors(&union),
            cursors(&control),
            "{topic}: the two connections together got exactly the control's events, in order (cursors shown; the first connection's last: {})",
            last[topic]
        );
        assert!(
            union
                .iter()
                .zip(&control)
                .all(|(a, b)| a.result == b.result),
            "{topic}: and the same payloads"
        );
        removed += resumed[topic]
            .iter()
            .filter(|d| d.result["removed"] == json!(true))
            .count();
    }
    assert!(
        removed > 0,
        "the resumed streams carried the reorg's removals"
    );
}

/// A subscription made with `resumeFrom` the head cursor gets, on every
/// topic, exactly what a plain one made earlier gets after the cursor's
/// step: what a resuming client subscribes from before its first
/// notification. The plain one is read by a task throughout (a
/// subscriber left unread is closed as stalled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_from_the_head_cursor_gets_what_follows_its_step() {
    let Scene {
        server: _server,
        _dir,
        token,
        url,
        mut control,
        control_ids,
    } = Scene::start().await;
    let mut controlled: BTreeMap<&'static str, Vec<Delivered>> = BTreeMap::new();
    read_until_each(&mut control, &control_ids, &mut controlled, 1).await;
    let mut feed = control.forward_notifications();

    let mut resumed = WsClient::connect(&url).await.expect("connect");
    let head = resumed
        .call("chainsieve_headCursor", json!([]))
        .await
        .expect("answered")["result"]
        .as_str()
        .expect("a cursor: the chain has blocks")
        .to_string();
    let head: Cursor = head.parse().expect("a cursor");
    let after = head.position.expect("a logged step");
    let resumed_ids = subscribe_all(&mut resumed, &token, |_| {
        Some(json!({"resumeFrom": head.to_string()}))
    })
    .await;
    let mut got: BTreeMap<&'static str, Vec<Delivered>> = BTreeMap::new();
    read_until_each(&mut resumed, &resumed_ids, &mut got, 3).await;

    for (topic, delivered) in &got {
        assert!(
            delivered.iter().all(|d| d.position() > after),
            "{topic}: nothing of the head's step or before: {delivered:?}"
        );
        let last = delivered.last().expect("some").mark();
        while controlled
            .get(topic)
            .and_then(|c| c.last())
            .is_none_or(|c| c.mark() < last)
        {
            file(
                &next_forwarded(&mut feed).await,
                &control_ids,
                &mut controlled,
            );
        }
        let expected: Vec<&Delivered> = controlled[topic]
            .iter()
            .filter(|d| d.position() > after && d.mark() <= last)
            .collect();
        assert_eq!(
            delivered.iter().collect::<Vec<_>>(),
            expected,
            "{topic}: what the plain subscription got after the head's step"
        );
    }
}

/// The mined topics replay from the start of a block within the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_block_replays_heads_from_that_block_then_goes_live() {
    let (config, _dir) = config(1_024, 0);
    let server = TestServer::started(config).await;
    let (mut ws, live, now) = heads_from_block_four(&server, "bsc").await;
    let replay = ws
        .subscribe(json!(["newHeads", {"fromBlock": format!("{:#x}", now - 3)}]))
        .await
        .expect("subscribe");
    let mut numbers = Vec::new();
    while numbers.len() < 6 {
        let (subscription, head) = ws.next_notification().await.expect("heads");
        if subscription == replay {
            numbers.push(quantity(&head["number"]));
        } else {
            assert_eq!(subscription, live);
        }
    }
    assert_eq!(numbers[..4], [now - 3, now - 2, now - 1, now]);
    // Then live, from the next block: no gap and no repeat at the seam.
    assert!(
        numbers.windows(2).all(|pair| pair[1] == pair[0] + 1),
        "{numbers:?}"
    );
}

/// Every refusal is a JSON-RPC error with the right code and a message
/// saying what was wrong, and the connection serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_resumes_are_refused_with_their_codes() {
    let (config, _dir) = config(8, 0);
    let server = TestServer::started(config).await;
    let mut bsc = WsClient::connect(&server.ws_url("bsc", "demo"))
        .await
        .expect("connect");
    bsc.subscribe(json!(["newHeads"])).await.expect("subscribe");
    let bsc_cursor = bsc.next_notification_params().await.expect("a head")["cursor"].clone();

    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    ws.next_notification_params().await.expect("a head");
    for (params, code, says) in [
        (
            json!(["newHeads", {"resumeFrom": "not-a-cursor"}]),
            -32602,
            "not a chainsieve cursor",
        ),
        (
            json!(["newHeads", {"resumeFrom": bsc_cursor}]),
            -32602,
            "is of chain bsc",
        ),
        (
            json!(["newHeads", {"fromBlock": "0xffffff"}]),
            -32602,
            "past eth's tip",
        ),
        (
            json!(["newPendingTransactions", {"fromBlock": "0x1"}]),
            -32602,
            "resume it with resumeFrom",
        ),
        (
            json!(["logs", {"address": "0x00000000000000000000000000000000000000aa", "resumeFrom": "x"}]),
            -32602,
            "options object of its own",
        ),
    ] {
        let response = ws
            .call("eth_subscribe", params.clone())
            .await
            .expect("answered");
        assert_eq!(
            response["error"]["code"],
            json!(code),
            "{params}: {response}"
        );
        let message = response["error"]["message"].as_str().expect("a message");
        assert!(message.contains(says), "{params}: {message}");
    }
    let response = ws
        .call("eth_blockNumber", json!([]))
        .await
        .expect("answered");
    assert!(
        response["result"].is_string(),
        "the connection serves on: {response}"
    );
}

/// A resume inside a JSON-RPC batch replays only once the batch response,
/// which tells the client the subscription's id, is on its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_in_a_batch_replays_after_the_batch_response() {
    let (config, _dir) = config(1_024, 0);
    let server = TestServer::started(config).await;
    let (mut ws, live, now) = heads_from_block_four(&server, "polygon").await;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 7, "method": "eth_subscribe", "params": ["newHeads", {"fromBlock": format!("{:#x}", now - 2)}]},
        {"jsonrpc": "2.0", "id": 8, "method": "eth_chainId", "params": []},
    ]);
    ws.send_text(&batch.to_string()).await;
    let response = ws.next_response().await.expect("the batch response");
    let replay = response
        .as_array()
        .and_then(|answers| answers.iter().find(|a| a["id"] == 7))
        .and_then(|answer| answer["result"].as_str())
        .unwrap_or_else(|| panic!("a subscription id in {response}"))
        .to_string();
    for _ in 0..ws.buffered_notifications() {
        let (subscription, _) = ws.next_notification().await.expect("buffered");
        assert_eq!(subscription, live, "nothing replayed before the response");
    }
    let mut numbers = Vec::new();
    while numbers.len() < 3 {
        let (subscription, head) = ws.next_notification().await.expect("heads");
        if subscription == replay {
            numbers.push(quantity(&head["number"]));
        }
    }
    assert_eq!(numbers, [now - 2, now - 1, now]);
}
