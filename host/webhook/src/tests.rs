//! The service against stand-ins, without sockets or a bus: a store whose
//! changes the test reports (as another edge's writes would come), claims
//! the test grants and takes away, a feed that counts its opens and
//! closes, and a transport that accepts every delivery.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use url::Url;

use super::claim::{Claim, Claims};
use super::definition::Paused;
use super::post::{Envelope, Line, Outcome, Transport};
use super::store::{Change, EmbeddedWebhooks, Store};
use super::*;
use chainsieve_fanout::{Notice, Via};

const WAIT: Duration = Duration::from_secs(5);

/// The real store in memory, with the changes the test reports.
#[derive(Debug)]
struct Shared {
    inner: EmbeddedWebhooks,
    changes: Mutex<Option<mpsc::Receiver<Change>>>,
}

impl Store for Shared {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Vec<(Definition, Progress)>>> {
        self.inner.load()
    }
    fn read(
        &self,
        id: String,
    ) -> BoxFuture<'_, anyhow::Result<Option<(Definition, u64, Progress)>>> {
        self.inner.read(id)
    }
    fn changes(&self) -> BoxStream<'static, Change> {
        let taken = self
            .changes
            .lock()
            .expect("lock")
            .take()
            .expect("changes taken once");
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(taken))
    }
    fn put_definition(
        &self,
        definition: Definition,
        expected: u64,
    ) -> BoxFuture<'_, anyhow::Result<u64>> {
        self.inner.put_definition(definition, expected)
    }
    fn put_progress(&self, id: String, progress: Progress) -> BoxFuture<'_, anyhow::Result<()>> {
        self.inner.put_progress(id, progress)
    }
    fn delete(&self, id: String) -> BoxFuture<'_, anyhow::Result<()>> {
        self.inner.delete(id)
    }
    fn close(&self) {
        self.inner.close();
    }
}

/// What the feed saw: an open (with the cursor asked and the queue) or a
/// close.
enum Seen {
    Opened(Option<String>, Sink),
    Closed,
}

struct Feed(mpsc::UnboundedSender<Seen>);

impl Feeds for Feed {
    fn open<'a>(
        &'a self,
        _definition: &'a Definition,
        cursor: Option<&'a str>,
        sink: Sink,
    ) -> BoxFuture<'a, Result<Opened, FeedRefused>> {
        let _ = self.0.send(Seen::Opened(cursor.map(str::to_owned), sink));
        let closes = self.0.clone();
        Box::pin(async move {
            Ok(Opened::new(Box::pin(async move {
                let _ = closes.send(Seen::Closed);
            })))
        })
    }
}

/// Accepts every delivery, handing its body to the test.
struct Accept(mpsc::UnboundedSender<Value>);

impl Transport for Accept {
    fn post<'a>(
        &'a self,
        _line: &'a mut Line,
        _url: &'a Url,
        _envelope: Envelope<'a>,
        body: Bytes,
    ) -> BoxFuture<'a, Outcome> {
        let _ = self.0.send(serde_json::from_slice(&body).expect("JSON"));
        Box::pin(async { Outcome::Delivered })
    }
}

/// Claims the test grants one by one; each granted claim's `lost` token
/// is handed to the test.
struct Granted {
    asked: mpsc::UnboundedSender<()>,
    grants: tokio::sync::Mutex<mpsc::UnboundedReceiver<CancellationToken>>,
}

impl Claims for Granted {
    fn claim<'a>(
        &'a self,
        _id: &'a str,
        stop: &'a CancellationToken,
    ) -> BoxFuture<'a, Option<Claim>> {
        Box::pin(async move {
            let _ = self.asked.send(());
            let mut grants = self.grants.lock().await;
            tokio::select! {
                () = stop.cancelled() => None,
                lost = grants.recv() => lost.map(|lost| Claim::new(lost, CancellationToken::new())),
            }
        })
    }
}

/// Resolves every name to a public address, but `hang.example`, which
/// it never answers.
struct Names;

impl target::Resolve for Names {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<std::net::SocketAddr>>> {
        Box::pin(async move {
            if host == "hang.example" {
                std::future::pending::<()>().await;
            }
            Ok(vec![std::net::SocketAddr::from(([93, 184, 216, 34], port))])
        })
    }
}

struct Bench {
    webhooks: Arc<Webhooks>,
    store: Arc<Shared>,
    changes: mpsc::Sender<Change>,
    seen: mpsc::UnboundedReceiver<Seen>,
    bodies: mpsc::UnboundedReceiver<Value>,
    asked: mpsc::UnboundedReceiver<()>,
    grants: mpsc::UnboundedSender<CancellationToken>,
    shutdown: CancellationToken,
}

fn definition(id: &str) -> Definition {
    Definition {
        id: id.into(),
        owner: chainsieve_keys::record::digest("elsewhere"),
        chain: "eth".into(),
        url: "https://example.com/hook".into(),
        subscribe: vec![json!("newHeads")],
        batch: Batching::default(),
        secret: "whsec_test".into(),
        created_at: 1,
        paused: None,
    }
}

impl Bench {
    async fn start() -> Self {
        let (changes, reported) = mpsc::channel(64);
        let (seen_in, seen) = mpsc::unbounded_channel();
        let (bodies_in, bodies) = mpsc::unbounded_channel();
        let (asked_in, asked) = mpsc::unbounded_channel();
        let (grants, granted) = mpsc::unbounded_channel();
        let tasks = chainsieve_runtime::tasks::Tasks::new(CancellationToken::new());
        let store = Arc::new(Shared {
            inner: EmbeddedWebhooks::open(
                None,
                &tasks,
                &chainsieve_runtime::queues::Queues::default(),
            )
            .expect("a store"),
            changes: Mutex::new(Some(reported)),
        });
        let shutdown = CancellationToken::new();
        let parts = Parts {
            config: WebhooksConfig::default(),
            store: store.clone(),
            feeds: Arc::new(Feed(seen_in)),
            transport: Arc::new(Accept(bodies_in)),
            claims: Arc::new(Granted {
                asked: asked_in,
                grants: tokio::sync::Mutex::new(granted),
            }),
            resolver: Arc::new(Names),
        };
        let webhooks = Webhooks::start(parts, &tasks, shutdown.clone())
            .await
            .expect("starts");
        Self {
            webhooks,
            store,
            changes,
            seen,
            bodies,
            asked,
            grants,
            shutdown,
        }
    }

    /// Another edge writes `definition`; its change comes at `revision`.
    async fn written_elsewhere(&self, definition: Definition, revision: u64) {
        self.store
            .put_definition(definition.clone(), 0)
            .await
            .expect("stored");
        self.changes
            .try_send(Change::Defined(definition, revision))
            .expect("reported");
    }

    async fn asked_for_a_claim(&mut self) {
        timeout(WAIT, self.asked.recv())
            .await
            .expect("asked in time")
            .expect("asked");
    }

    /// Grants the claim asked for; its `lost` token.
    fn grant(&self) -> CancellationToken {
        let lost = CancellationToken::new();
        self.grants.send(lost.clone()).expect("granted");
        lost
    }

    async fn opened(&mut self) -> (Option<String>, Sink) {
        match timeout(WAIT, self.seen.recv())
            .await
            .expect("in time")
            .expect("seen")
        {
            Seen::Opened(cursor, sink) => (cursor, sink),
            Seen::Closed => panic!("closed, not opened"),
        }
    }

    async fn closed(&mut self) {
        match timeout(WAIT, self.seen.recv())
            .await
            .expect("in time")
            .expect("seen")
        {
            Seen::Closed => {}
            Seen::Opened(..) => panic!("opened, not closed"),
        }
    }

    async fn delivered(&mut self) -> Value {
        timeout(WAIT, self.bodies.recv())
            .await
            .expect("in time")
            .expect("a body")
    }
}

fn notify(sink: &Sink, id: &str, n: u64) {
    let notice = Notice::new(
        &format!("{{\"n\":{n}}}"),
        Some(&format!("eth:{n}:0:{n:016x}")),
    );
    sink.notify_all(&Arc::from(id), [notice].iter(), Via::Queue)
        .expect("room");
}

/// A webhook another edge made is known here at once, and delivered here
/// once this process holds its claim.
#[tokio::test]
async fn a_webhook_made_elsewhere_is_claimed_and_delivered_here() {
    let mut bench = Bench::start().await;
    bench.written_elsewhere(definition("0x01"), 3).await;
    bench.asked_for_a_claim().await;
    let owner = chainsieve_keys::record::digest("elsewhere");
    assert_eq!(
        bench.webhooks.list(&owner).len(),
        1,
        "known before it is claimed"
    );
    bench.grant();
    let (from, sink) = bench.opened().await;
    assert_eq!(from, None);
    notify(&sink, "0x01", 1);
    let body = bench.delivered().await;
    assert_eq!(body["notifications"][0]["result"]["n"], 1);
    bench.shutdown.cancel();
}

/// Paused elsewhere: the worker here stops (its subscription closed), and
/// a change older than what it applied (an echo, a stale read) changes
/// nothing. Deleted elsewhere: forgotten here.
#[tokio::test]
async fn a_pause_from_elsewhere_stops_delivery_and_a_stale_change_is_ignored() {
    let mut bench = Bench::start().await;
    bench.written_elsewhere(definition("0x02"), 3).await;
    bench.asked_for_a_claim().await;
    bench.grant();
    let (_, _sink) = bench.opened().await;
    let mut paused = definition("0x02");
    paused.paused = Some(Paused {
        at: 2,
        reason: "paused by its owner".into(),
    });
    bench
        .store
        .put_definition(paused.clone(), 3)
        .await
        .expect("stored");
    bench
        .changes
        .try_send(Change::Defined(paused, 4))
        .expect("reported");
    bench.closed().await;
    let owner = chainsieve_keys::record::digest("elsewhere");
    assert_eq!(
        bench.webhooks.get(&owner, "0x02").expect("known")["state"],
        "paused"
    );
    bench
        .changes
        .try_send(Change::Defined(definition("0x02"), 3))
        .expect("reported");
    bench
        .changes
        .try_send(Change::Deleted("0x02".into()))
        .expect("reported");
    let deadline = tokio::time::Instant::now() + WAIT;
    while !bench.webhooks.list(&owner).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "forgotten in time");
        tokio::task::yield_now().await;
    }
    assert!(
        bench.asked.try_recv().is_err(),
        "the stale active change started no worker"
    );
    bench.shutdown.cancel();
}

/// A claim lost (another edge took the lease): delivery stops, the
/// subscription closes, and this process stands by for the claim; granted
/// again, it reads the progress fresh and opens after its cursor.
#[tokio::test]
async fn a_lost_claim_stops_delivery_and_the_next_starts_from_the_stored_cursor() {
    let mut bench = Bench::start().await;
    bench.written_elsewhere(definition("0x03"), 3).await;
    bench.asked_for_a_claim().await;
    let lost = bench.grant();
    let (_, sink) = bench.opened().await;
    notify(&sink, "0x03", 1);
    bench.delivered().await;
    lost.cancel();
    bench.closed().await;
    bench.asked_for_a_claim().await;
    // Meanwhile the edge that held it delivered further.
    let progress = Progress {
        cursor: Some("eth:9:0:0000000000000009".into()),
        ..Progress::default()
    };
    bench
        .store
        .put_progress("0x03".into(), progress)
        .await
        .expect("stored");
    bench.grant();
    let (from, _) = bench.opened().await;
    assert_eq!(from.as_deref(), Some("eth:9:0:0000000000000009"));
    bench.shutdown.cancel();
}

/// A creation whose receiver's name never resolves delays no other key's:
/// nothing is awaited under a lock other creations need. It is refused
/// once the name has had its time, saying so.
#[tokio::test]
async fn a_name_that_never_resolves_delays_no_other_creation() {
    let mut bench = Bench::start().await;
    let request = |url: &str| Create {
        chain: "eth".into(),
        url: url.into(),
        subscribe: vec![json!("newHeads")],
        batch: Batching::default(),
    };
    let most = Most {
        webhooks: 1,
        plan: Arc::from("default"),
        origin: "webhooks.max_per_key".into(),
    };
    let webhooks = bench.webhooks.clone();
    let (hanging_most, hanging_request) = (most.clone(), request("https://hang.example/hook"));
    let hanging = tokio::spawn(async move {
        webhooks
            .create(
                &chainsieve_keys::record::digest("a"),
                hanging_request,
                hanging_most,
            )
            .await
    });
    let webhooks = bench.webhooks.clone();
    let (other_most, other_request) = (most.clone(), request("https://ok.example/hook"));
    let other = tokio::spawn(async move {
        webhooks
            .create(
                &chainsieve_keys::record::digest("b"),
                other_request,
                other_most,
            )
            .await
    });
    bench.asked_for_a_claim().await;
    bench.grant();
    let made = timeout(WAIT, other)
        .await
        .expect("made in time")
        .expect("the task")
        .expect("made");
    assert_eq!(made["url"], "https://ok.example/hook");
    assert!(!hanging.is_finished(), "its name is still being resolved");
    // The same key, while its first creation waits: one place, taken.
    let again = bench
        .webhooks
        .create(
            &chainsieve_keys::record::digest("a"),
            request("https://ok.example/x"),
            most,
        )
        .await;
    assert!(
        matches!(&again, Err(WebhookError::Limit(why)) if why.contains("1 being made")),
        "{again:?}"
    );
    tokio::time::pause();
    let refused = hanging.await.expect("the task");
    assert!(
        matches!(&refused, Err(WebhookError::Invalid(why)) if why.contains("hang.example did not resolve within 5 s")),
        "{refused:?}"
    );
    bench.shutdown.cancel();
}
