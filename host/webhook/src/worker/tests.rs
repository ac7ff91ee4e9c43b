//! The worker against stand-ins, without sockets: a feed whose queues the
//! test fills (and that refuses on cue), a transport the test answers
//! try by try, and the real store in memory.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use url::Url;

use super::{Hook, Shared, run};
use crate::definition::{Batching, Definition, Progress, State};
use crate::feed::{FeedRefused, Feeds, Opened};
use crate::post::{Envelope, Line, Outcome, Transport};
use crate::store::{EmbeddedWebhooks, Store};
use chainsieve_config::WebhooksConfig;
use chainsieve_fanout::{Notice, Sink, Via};

const ID: &str = "0x00000000000000000000000000000001";
const WAIT: Duration = Duration::from_secs(5);

/// Each open hands the test the cursor asked and the queue's sink.
struct Feed {
    opens: mpsc::UnboundedSender<(Option<String>, Sink)>,
    /// Refusals answered to the next opens, first first.
    refusals: std::sync::Mutex<VecDeque<FeedRefused>>,
}

impl Feeds for Feed {
    fn open<'a>(
        &'a self,
        _definition: &'a Definition,
        cursor: Option<&'a str>,
        sink: Sink,
    ) -> BoxFuture<'a, Result<Opened, FeedRefused>> {
        let refused = self.refusals.lock().expect("lock").pop_front();
        if refused.is_none() {
            let _ = self.opens.send((cursor.map(str::to_owned), sink));
        }
        Box::pin(async move {
            match refused {
                Some(refusal) => Err(refusal),
                None => Ok(Opened::new(Box::pin(async {}))),
            }
        })
    }
}

/// A try the test answers.
struct Try {
    delivery: String,
    body: Value,
    answer: oneshot::Sender<Outcome>,
}

struct Script(mpsc::UnboundedSender<Try>);

impl Transport for Script {
    fn post<'a>(
        &'a self,
        _line: &'a mut Line,
        _url: &'a Url,
        envelope: Envelope<'a>,
        body: Bytes,
    ) -> BoxFuture<'a, Outcome> {
        let (answer, outcome) = oneshot::channel();
        let _ = self.0.send(Try {
            delivery: envelope.delivery.to_owned(),
            body: serde_json::from_slice(&body).expect("a JSON body"),
            answer,
        });
        Box::pin(async move {
            outcome.await.unwrap_or(Outcome::Retry {
                reason: "the test dropped the try".into(),
                after: None,
            })
        })
    }
}

struct Bench {
    hook: Arc<Hook>,
    store: Arc<EmbeddedWebhooks>,
    opens: mpsc::UnboundedReceiver<(Option<String>, Sink)>,
    tries: mpsc::UnboundedReceiver<Try>,
    feed: Arc<Feed>,
    stop: CancellationToken,
    done: tokio::task::JoinHandle<()>,
}

fn cursor(n: u64) -> String {
    format!("eth:{n}:0:{n:016x}")
}

fn notice(n: u64) -> Notice {
    Notice::new(&format!("{{\"n\":{n}}}"), Some(&cursor(n)))
}

/// Unix milliseconds by tokio's clock, which paused tests advance.
fn tokio_clock() -> u64 {
    static BASE: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(tokio::time::Instant::now);
    1_700_000_000_000 + u64::try_from(base.elapsed().as_millis()).expect("ms")
}

impl Bench {
    async fn start(
        config: WebhooksConfig,
        batch: Batching,
        progress: Progress,
        refusals: Vec<FeedRefused>,
    ) -> Self {
        let (opens_in, opens) = mpsc::unbounded_channel();
        let (tries_in, tries) = mpsc::unbounded_channel();
        let store = Arc::new(
            EmbeddedWebhooks::open(
                None,
                &chainsieve_runtime::tasks::Tasks::new(CancellationToken::new()),
                &chainsieve_runtime::queues::Queues::default(),
            )
            .expect("a store"),
        );
        let feed = Arc::new(Feed {
            opens: opens_in,
            refusals: std::sync::Mutex::new(refusals.into()),
        });
        let definition = Definition {
            id: ID.into(),
            owner: "owner".into(),
            chain: "eth".into(),
            url: "https://example.com/hook".into(),
            subscribe: vec![json!("logs")],
            batch,
            secret: "whsec_test".into(),
            created_at: 1,
            paused: None,
        };
        store
            .put_definition(definition.clone(), 0)
            .await
            .expect("stored");
        let shared = Arc::new(Shared {
            feeds: feed.clone(),
            store: store.clone(),
            transport: Arc::new(Script(tries_in)),
            config,
            clock: tokio_clock,
            deliveries: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        });
        let hook = Arc::new(Hook::new(definition, 0, progress));
        let stop = CancellationToken::new();
        let done = tokio::spawn(run(hook.clone(), shared, stop.clone(), None));
        Self {
            hook,
            store,
            opens,
            tries,
            feed,
            stop,
            done,
        }
    }

    async fn opened(&mut self) -> (Option<String>, Sink) {
        timeout(WAIT, self.opens.recv())
            .await
            .expect("opened in time")
            .expect("an open")
    }

    async fn next_try(&mut self) -> Try {
        timeout(WAIT, self.tries.recv())
            .await
            .expect("a try in time")
            .expect("a try")
    }

    fn state(&self) -> State {
        self.hook.state()
    }

    async fn stored(&self) -> Progress {
        let stored = self.store.load().await.expect("loads");
        stored
            .into_iter()
            .next()
            .map(|(_, progress)| progress)
            .unwrap_or_default()
    }
}

fn push(
    sink: &Sink,
    numbers: impl IntoIterator<Item = u64>,
) -> Result<usize, chainsieve_fanout::SendError> {
    let notices: Vec<Notice> = numbers.into_iter().map(notice).collect();
    sink.notify_all(&Arc::from(ID), notices.iter(), Via::Queue)
}

fn numbers(body: &Value) -> Vec<u64> {
    body["notifications"]
        .as_array()
        .expect("notifications")
        .iter()
        .map(|params| {
            assert_eq!(params["subscription"], ID);
            params["result"]["n"].as_u64().expect("n")
        })
        .collect()
}

fn quick() -> WebhooksConfig {
    WebhooksConfig {
        retry_initial_ms: 10,
        retry_max_ms: 40,
        queue: 4,
        ..WebhooksConfig::default()
    }
}

/// Batches go one at a time, each after the last was accepted, at most
/// `maxEvents` each, in order; each one's id is its last cursor, which is
/// recorded in flight before the try and as delivered after it.
#[tokio::test]
async fn batches_go_in_order_each_after_the_last_is_accepted() {
    let batch = Batching {
        max_events: 2,
        max_wait_ms: 0,
    };
    let mut bench = Bench::start(quick(), batch, Progress::default(), vec![]).await;
    let (from, sink) = bench.opened().await;
    assert_eq!(from, None, "a new webhook starts from its own options");
    push(&sink, 1..=3).expect("room");
    let first = bench.next_try().await;
    assert_eq!(numbers(&first.body), [1, 2]);
    assert_eq!(first.delivery, cursor(2));
    assert_eq!(first.body["delivery"], cursor(2));
    assert_eq!(
        bench.stored().await.inflight,
        Some(cursor(2)),
        "in flight before the try"
    );
    push(&sink, [4]).expect("room");
    assert!(
        timeout(Duration::from_millis(50), bench.tries.recv())
            .await
            .is_err(),
        "the next batch waits for the answer"
    );
    first.answer.send(Outcome::Delivered).expect("answered");
    let second = bench.next_try().await;
    assert_eq!(numbers(&second.body), [3, 4]);
    let progress = bench.stored().await;
    assert_eq!(progress.cursor, Some(cursor(2)));
    assert_eq!((progress.deliveries, progress.notifications), (1, 2));
    second.answer.send(Outcome::Delivered).expect("answered");
    push(&sink, [5]).expect("room");
    let third = bench.next_try().await;
    assert_eq!(numbers(&third.body), [5]);
    third.answer.send(Outcome::Delivered).expect("answered");
    bench.stop.cancel();
    (&mut bench.done).await.expect("the worker ends");
    let progress = bench.stored().await;
    assert_eq!(progress.cursor, Some(cursor(5)));
    assert_eq!(progress.inflight, None);
    assert_eq!((progress.deliveries, progress.notifications), (3, 5));
}

/// A batch is tried again, the same body under the same id, until it is
/// accepted; the webhook says it is retrying (a timeout, a 5xx) or failing
/// (a refusal) meanwhile, and is active again once it is accepted.
#[tokio::test]
async fn a_batch_is_tried_again_until_accepted() {
    let mut bench = Bench::start(quick(), Batching::default(), Progress::default(), vec![]).await;
    let (_, sink) = bench.opened().await;
    push(&sink, [1, 2]).expect("room");
    let first = bench.next_try().await;
    first
        .answer
        .send(Outcome::Retry {
            reason: "HTTP 503".into(),
            after: None,
        })
        .expect("answered");
    let second = bench.next_try().await;
    assert_eq!(
        (second.delivery.as_str(), &second.body),
        (first.delivery.as_str(), &first.body)
    );
    assert_eq!(bench.state(), State::Retrying);
    let since = bench
        .hook
        .progress()
        .trouble
        .clone()
        .expect("trouble")
        .since;
    second
        .answer
        .send(Outcome::Refused {
            reason: "HTTP 404: no such hook".into(),
        })
        .expect("answered");
    let third = bench.next_try().await;
    assert_eq!(bench.state(), State::Failing);
    let trouble = bench.hook.progress().trouble.clone().expect("trouble");
    assert_eq!(
        (trouble.since, trouble.last_error.as_str()),
        (since, "HTTP 404: no such hook")
    );
    third.answer.send(Outcome::Delivered).expect("answered");
    push(&sink, [3]).expect("room");
    let fourth = bench.next_try().await;
    assert_eq!(numbers(&fourth.body), [3]);
    assert_eq!(bench.state(), State::Active);
    assert_eq!(bench.hook.progress().failures, 2);
}

/// A receiver slower than the chain overflows the queue: what it held
/// (all queued before the overflow) is delivered, then the subscription
/// is opened again after the last cursor delivered; nothing is skipped.
#[tokio::test]
async fn an_overflow_is_caught_up_from_the_cursor() {
    let mut bench = Bench::start(quick(), Batching::default(), Progress::default(), vec![]).await;
    let (_, sink) = bench.opened().await;
    push(&sink, [1]).expect("room");
    let first = bench.next_try().await;
    push(&sink, 2..=5).expect("room for four");
    assert!(push(&sink, [6]).is_err(), "overflows");
    assert!(push(&sink, [7]).is_err(), "nothing after the gap");
    first.answer.send(Outcome::Delivered).expect("answered");
    let second = bench.next_try().await;
    assert_eq!(numbers(&second.body), [2, 3, 4, 5]);
    second.answer.send(Outcome::Delivered).expect("answered");
    let (from, sink) = bench.opened().await;
    assert_eq!(from, Some(cursor(5)), "read on after the last delivered");
    push(&sink, 6..=7).expect("room");
    let third = bench.next_try().await;
    assert_eq!(numbers(&third.body), [6, 7]);
}

/// After a restart, the first batch ends where the one in flight did, so
/// it goes under the same delivery id, however much more is queued.
#[tokio::test]
async fn the_batch_in_flight_at_a_restart_keeps_its_id() {
    let progress = Progress {
        cursor: Some(cursor(1)),
        inflight: Some(cursor(3)),
        ..Progress::default()
    };
    let mut bench = Bench::start(quick(), Batching::default(), progress, vec![]).await;
    let (from, sink) = bench.opened().await;
    assert_eq!(from, Some(cursor(1)));
    push(&sink, [2]).expect("room");
    push(&sink, [3, 4]).expect("room");
    let first = bench.next_try().await;
    assert_eq!(
        numbers(&first.body),
        [2, 3],
        "waited for the in-flight cursor"
    );
    assert_eq!(first.delivery, cursor(3));
    first.answer.send(Outcome::Delivered).expect("answered");
    let second = bench.next_try().await;
    assert_eq!(numbers(&second.body), [4]);
}

/// A subscription the server ends, or one that cannot be opened, is opened
/// again from the cursor after a pause, the reason on the webhook
/// meanwhile.
#[tokio::test]
async fn an_ended_subscription_is_opened_again_from_the_cursor() {
    let refusal = FeedRefused {
        code: -32603,
        message: "the logs filter is disabled".into(),
    };
    let mut bench = Bench::start(quick(), Batching::default(), Progress::default(), vec![]).await;
    let (_, sink) = bench.opened().await;
    push(&sink, [1]).expect("room");
    let first = bench.next_try().await;
    first.answer.send(Outcome::Delivered).expect("answered");
    bench.feed.refusals.lock().expect("lock").push_back(refusal);
    sink.send(chainsieve_fanout::ended(
        ID,
        -32000,
        "the logs filter was removed",
    ))
    .expect("room");
    let (from, _sink) = bench.opened().await;
    assert_eq!(from, Some(cursor(1)));
    assert_eq!(
        bench.hook.progress().failures,
        2,
        "the end, then the refused open"
    );
    let trouble = bench.hook.progress().trouble.clone().expect("trouble");
    assert!(
        trouble.last_error.contains("the logs filter is disabled"),
        "{}",
        trouble.last_error
    );
}

/// A webhook that keeps failing for `pause_after_secs` is paused, saying
/// why, and its worker ends.
#[tokio::test(start_paused = true)]
async fn a_webhook_failing_too_long_is_paused() {
    let config = WebhooksConfig {
        pause_after_secs: 10,
        retry_initial_ms: 1_000,
        retry_max_ms: 4_000,
        ..quick()
    };
    let mut bench = Bench::start(config, Batching::default(), Progress::default(), vec![]).await;
    let (_, sink) = bench.opened().await;
    push(&sink, [1]).expect("room");
    // Every try times out, until the worker ends (and its transport
    // with it).
    while let Some(attempt) = bench.tries.recv().await {
        let _ = attempt.answer.send(Outcome::Retry {
            reason: "no answer within 10000 ms".into(),
            after: None,
        });
    }
    (&mut bench.done).await.expect("the worker ends");
    let paused = bench.hook.definition().paused.clone().expect("paused");
    assert!(
        paused
            .reason
            .starts_with("failed for 10 s: no answer within 10000 ms"),
        "{}",
        paused.reason
    );
    assert_eq!(bench.state(), State::Paused);
    let stored = bench.store.load().await.expect("loads");
    assert_eq!(
        stored[0].0.paused.as_ref(),
        Some(&paused),
        "the pause is stored"
    );
}

/// A batch is never POSTed before the store holds it as in flight: with
/// the store failing, the webhook retries storing it, says why, and
/// nothing goes out.
#[tokio::test(start_paused = true)]
async fn nothing_is_posted_before_the_batch_in_flight_is_stored() {
    let mut bench = Bench::start(quick(), Batching::default(), Progress::default(), vec![]).await;
    let (_, sink) = bench.opened().await;
    bench.store.close();
    push(&sink, [1]).expect("room");
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if bench.hook.progress().failures >= 2 {
            break;
        }
    }
    let trouble = bench.hook.progress().trouble.clone().expect("trouble");
    assert!(
        trouble
            .last_error
            .starts_with("its progress could not be stored"),
        "{}",
        trouble.last_error
    );
    assert!(bench.tries.try_recv().is_err(), "nothing was posted");
    assert_eq!(bench.state(), State::Retrying);
}

/// A delivery's progress is written at once when no batch follows at
/// once, and with the next batch's in-flight mark when one does (one
/// write a batch while a backlog drains).
#[tokio::test]
async fn a_delivery_is_written_at_once_or_with_the_batch_after_it() {
    let batch = Batching {
        max_events: 1,
        max_wait_ms: 0,
    };
    let mut bench = Bench::start(quick(), batch, Progress::default(), vec![]).await;
    let (_, sink) = bench.opened().await;
    push(&sink, [1]).expect("room");
    let first = bench.next_try().await;
    first.answer.send(Outcome::Delivered).expect("answered");
    let mut stored = bench.stored().await;
    for _ in 0..500 {
        if stored.cursor.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        stored = bench.stored().await;
    }
    assert_eq!(
        (stored.cursor, stored.inflight, stored.deliveries),
        (Some(cursor(1)), None, 1),
        "nothing followed: written at once"
    );
    push(&sink, [2, 3]).expect("room");
    let second = bench.next_try().await;
    assert_eq!(numbers(&second.body), [2]);
    second.answer.send(Outcome::Delivered).expect("answered");
    let third = bench.next_try().await;
    assert_eq!(numbers(&third.body), [3]);
    let stored = bench.stored().await;
    assert_eq!(
        (stored.cursor, stored.inflight, stored.deliveries),
        (Some(cursor(2)), Some(cursor(3)), 2),
        "the second delivery written with the third's in-flight mark"
    );
}
