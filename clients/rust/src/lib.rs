//! chainsieve-client: an alloy pubsub connector that survives its socket.
//!
//! [`ResumingConnect`] goes where alloy's `WsConnect` goes
//! (`ClientBuilder::default().pubsub(connect)`, `ProviderBuilder::new()
//! .connect_pubsub_with(connect)`), so alloy's subscriptions and every
//! request work unchanged. It keeps the cursor of the last notification of
//! every subscription handed to alloy; when the socket drops (a reset, the
//! server restarting, a missed heartbeat), it opens another after a
//! backoff with jitter, subscribes again with the same parameters plus
//! `resumeFrom` that cursor, and maps the server's new subscription id to
//! the one alloy holds. What the server replays, then what comes live,
//! reaches the application exactly once and in order, removals included
//! (the book's Clients chapter, docs/src/clients.md).
//!
//! Its modules:
//! - `session`: the rules, without a socket (what each message, drop and
//!   retry sends where), tested alone;
//! - `socket`: the connection's task, the one owner of the socket and the
//!   session;
//! - [`backoff`], [`cursors`]: the reconnection delays, and where an
//!   application keeps its cursors to resume after its own restart.
//!
//! alloy's own reconnection never runs: the connector hides every drop
//! from it (its resubscription from "now" is what loses events).

pub mod backoff;
pub mod cursors;
mod session;
mod socket;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use alloy_json_rpc::SubId;
use alloy_pubsub::{ConnectionHandle, PubSubConnect, PubSubFrontend};
use alloy_transport::{TransportErrorKind, TransportResult};

pub use backoff::Backoff;
pub use cursors::{CursorStore, MemoryCursorStore, subscription_key};

/// What a subscription the server refused to resume does next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnRefused {
    /// It ends (alloy's channel stays open and quiet).
    #[default]
    Stop,
    /// It is made again from the start of its last cursor's block (mined
    /// topics; events of that block may come again).
    FromBlock,
}

/// The server refused to resume, or ended, a subscription: events may be
/// missing from here on unless the application reads them otherwise.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("chainsieve refused to resume subscription {}{} ({code}): {server_message}", show(.subscription), .cursor.as_ref().map(|c| format!(" from cursor {c}")).unwrap_or_default())]
pub struct ResumeRefusedError {
    /// The server's JSON-RPC code (-32001: the cursor is older than the
    /// log keeps, or its block was reorganised out).
    pub code: i64,
    /// The server's message.
    pub server_message: String,
    /// The subscription's id, as alloy holds it.
    pub subscription: SubId,
    /// The cursor it was resumed from, if any.
    pub cursor: Option<String>,
}

fn show(id: &SubId) -> String {
    match id {
        SubId::Number(number) => format!("{number:#x}"),
        SubId::String(text) => text.clone(),
    }
}

/// The WebSocket pings that find a dead connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// Between pings.
    pub interval: Duration,
    /// How much longer than `interval` the socket may stay silent.
    pub timeout: Duration,
}

impl Default for Heartbeat {
    /// A ping every 15 s, the socket dead after 20 s without a frame: the
    /// JavaScript and Python packages'.
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(15),
            timeout: Duration::from_secs(5),
        }
    }
}

type OnError = Arc<dyn Fn(ResumeRefusedError) + Send + Sync>;

/// The connector's settings (documented defaults on each builder method of
/// [`ResumingConnect`]).
#[derive(Clone)]
pub(crate) struct Options {
    channel_size: usize,
    backoff: Backoff,
    heartbeat: Option<Heartbeat>,
    connect_timeout: Duration,
    on_error: OnError,
    on_refused: OnRefused,
    store: Option<Arc<dyn CursorStore>>,
}

/// Counters the application may read while the connector runs.
#[derive(Debug, Default)]
pub(crate) struct Status {
    reconnections: AtomicU64,
    subscriptions: AtomicUsize,
}

/// alloy's `PubSubConnect` for chainsieve: reconnects and resumes by itself.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use alloy_pubsub::PubSubConnect;
/// use chainsieve_client::ResumingConnect;
///
/// let connect = ResumingConnect::new("ws://127.0.0.1:8080/eth/v1/demo")
///     .on_error(|refused| eprintln!("{refused}"));
/// let frontend = connect.clone().into_service().await?;
/// # drop(frontend);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ResumingConnect {
    url: String,
    options: Options,
    status: Arc<Status>,
}

impl fmt::Debug for ResumingConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResumingConnect")
            .field("url", &self.url)
            .field("backoff", &self.options.backoff)
            .field("heartbeat", &self.options.heartbeat)
            .field("on_refused", &self.options.on_refused)
            .finish_non_exhaustive()
    }
}

impl ResumingConnect {
    /// A connector to `url` (`ws://` or `wss://`).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            options: Options {
                channel_size: 1_024,
                backoff: Backoff::default(),
                heartbeat: Some(Heartbeat::default()),
                connect_timeout: Duration::from_secs(10),
                on_error: Arc::new(|refused| tracing::error!(%refused, "chainsieve-client")),
                on_refused: OnRefused::Stop,
                store: None,
            },
            status: Arc::default(),
        }
    }

    /// How many notifications each subscription's channel in alloy holds
    /// for the application (default 1,024; alloy's own is 16). alloy's
    /// subscription streams skip, without a word, what overflowed a
    /// channel the application did not read in time: a burst larger than
    /// it (a block's logs, a batch of pending transactions) is lost there,
    /// past the connector. `Subscription::recv` says so
    /// (`RecvError::Lagged`).
    pub fn channel_size(mut self, size: usize) -> Self {
        self.options.channel_size = size.max(1);
        self
    }

    /// Reconnection delays (default: [`Backoff::default`]).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.options.backoff = backoff;
        self
    }

    /// The pings that find a dead connection (default:
    /// [`Heartbeat::default`]; `None` turns them off).
    pub fn heartbeat(mut self, heartbeat: Option<Heartbeat>) -> Self {
        self.options.heartbeat = heartbeat;
        self
    }

    /// How long one try to open the socket may take (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// Called with each [`ResumeRefusedError`] (default: logged at error
    /// level with `tracing`). Called on the connection's task: keep it
    /// quick (send it on a channel, say).
    pub fn on_error(
        mut self,
        on_error: impl Fn(ResumeRefusedError) + Send + Sync + 'static,
    ) -> Self {
        self.options.on_error = Arc::new(on_error);
        self
    }

    /// What a refused subscription does next (default [`OnRefused::Stop`]).
    pub fn on_refused(mut self, on_refused: OnRefused) -> Self {
        self.options.on_refused = on_refused;
        self
    }

    /// Where cursors are kept so the application resumes after its own
    /// restart (default: in memory only, for the life of the connection).
    pub fn store(mut self, store: Arc<dyn CursorStore>) -> Self {
        self.options.store = Some(store);
        self
    }

    /// How many times the socket was opened again.
    pub fn reconnections(&self) -> u64 {
        self.status.reconnections.load(Ordering::Relaxed)
    }

    /// How many subscriptions are active (made, and neither refused nor
    /// unsubscribed).
    pub fn subscription_count(&self) -> usize {
        self.status.subscriptions.load(Ordering::Relaxed)
    }
}

impl ResumingConnect {
    /// Opens the socket and starts the connection's task.
    async fn start(&self) -> TransportResult<ConnectionHandle> {
        let socket = socket::open(&self.url, self.options.connect_timeout)
            .await
            .map_err(|error| TransportErrorKind::custom_str(&error))?;
        let (handle, interface) = ConnectionHandle::new();
        tokio::spawn(socket::run(
            self.url.clone(),
            socket,
            interface,
            Arc::new(self.options.clone()),
            self.status.clone(),
        ));
        Ok(handle)
    }
}

impl PubSubConnect for ResumingConnect {
    fn is_local(&self) -> bool {
        alloy_transport::utils::guess_local_url(&self.url)
    }

    async fn connect(&self) -> TransportResult<ConnectionHandle> {
        self.start().await
    }

    /// alloy's service, with the subscription channels'
    /// [`channel_size`](ResumingConnect::channel_size).
    async fn into_service(self) -> TransportResult<PubSubFrontend> {
        let size = self.options.channel_size;
        let frontend = Service(self).into_service().await?;
        frontend.set_channel_size(size);
        Ok(frontend)
    }
}

/// The connector as alloy's own `into_service` takes it (which the public
/// type's replaces, to size the channels after).
struct Service(ResumingConnect);

impl PubSubConnect for Service {
    fn is_local(&self) -> bool {
        self.0.is_local()
    }

    async fn connect(&self) -> TransportResult<ConnectionHandle> {
        self.0.start().await
    }
}
