//! What every request handler shares ([`AppState`], one per server) and
//! the server's counters about its connections ([`Stats`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use chainsieve_chain::Chain;
use chainsieve_chain::reload::ReloadReport;
use chainsieve_chain::uploads::Uploads;
use chainsieve_config::{LimitsConfig, Role};
use chainsieve_history::limits::Streams;
use chainsieve_keys::per_key::PerKey;
use chainsieve_keys::{Key, Keys};
use chainsieve_rpc::methods::{self, Context};
use chainsieve_rpc::rate_limit::RateLimit;
use chainsieve_rpc::subscriptions::Subscriptions;
use chainsieve_runtime::metrics::Metrics;
use chainsieve_runtime::tasks::Tasks;
use chainsieve_usage::Ledger;
use chainsieve_watchlists::Watchlists;
use chainsieve_webhook::Webhooks;

/// Everything a request handler needs; one per server, built by
/// the server's wiring (`chainsieve::app::start`).
#[derive(Debug)]
pub struct AppState {
    /// An ingest serves no client: only the probes and `/metrics`.
    pub role: Role,
    pub chains: BTreeMap<String, Arc<Chain>>,
    /// Served at `/v1/<key>`.
    pub default_chain: String,
    /// The keys accepted, configured and managed (`/admin/keys`).
    pub keys: Arc<Keys>,
    /// The bearer token of `/admin/*`; `None` turns them off.
    pub admin_token: Option<String>,
    /// Shared with the webhooks' opener, which keys subscriptions from it.
    pub subscriptions: Arc<Subscriptions>,
    /// History streams reading the nodes, for `[history] max_streams`.
    pub history_streams: Arc<Streams>,
    /// Open WebSocket connections per key id, for its plan's
    /// `max_connections`.
    pub connections: Arc<PerKey>,
    /// Token buckets per key id, for its plan's `requests_per_second`.
    pub rate: RateLimit,
    /// What `/metrics` reports; shared with chains and filter actors.
    pub metrics: Arc<Metrics>,
    pub limits: LimitsConfig,
    /// Cancelled on shutdown: sessions close with 1001, sources stop.
    pub shutdown: CancellationToken,
    /// Every key's hourly usage; `None` on an ingest or with `[usage]
    /// enabled = false`.
    pub ledger: Option<Arc<Ledger>>,
    /// Every WebSocket session: [`serve`] returns only once they have all
    /// sent their close frames (hyper does not wait for upgraded
    /// connections).
    pub sessions: TaskTracker,
    /// The supervised background tasks (sources, pipelines, price
    /// indexers, the filters watcher, …): [`serve`] stops the server when
    /// a critical one fails, and returns once they have ended too, so that
    /// with this state dropped the price stores are closed before the
    /// process exits or a server on the same data directory starts.
    pub tasks: Tasks,
    pub stats: Stats,
    /// A new report after each scan of the filters directory.
    pub filter_reloads: watch::Receiver<ReloadReport>,
    /// Filter components uploaded by the admin API; `None` on an ingest,
    /// which runs no filters.
    pub uploads: Option<Arc<Uploads>>,
    /// The webhooks (of the deployment, on an edge); `None` on an ingest,
    /// which serves no client.
    pub webhooks: Option<Arc<Webhooks>>,
    /// Every key's watchlists; `None` where this role keeps none.
    pub watchlists: Option<Arc<Watchlists>>,
}

/// Counters about the server's connections.
#[derive(Debug, Default)]
pub struct Stats {
    closed_too_slow: AtomicU64,
}

impl Stats {
    /// Connections closed because their outbound queue overflowed.
    pub fn closed_too_slow(&self) -> u64 {
        self.closed_too_slow.load(Ordering::Relaxed)
    }

    pub(crate) fn count_closed_too_slow(&self) {
        self.closed_too_slow.fetch_add(1, Ordering::Relaxed);
    }
}

impl AppState {
    /// What a JSON-RPC call over `chain` with `api_key` may use.
    pub fn rpc_context<'a>(
        &'a self,
        chain: &'a Arc<Chain>,
        key: &'a Arc<Key>,
        connection: Option<&'a methods::Connection>,
    ) -> Context<'a> {
        Context {
            chain,
            chains: &self.chains,
            key,
            connection,
            subscriptions: &self.subscriptions,
            history_streams: &self.history_streams,
            rate: &self.rate,
            limits: &self.limits,
            webhooks: self.webhooks.as_ref(),
            watchlists: self.watchlists.as_ref(),
        }
    }
}
