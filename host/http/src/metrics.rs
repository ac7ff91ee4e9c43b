//! `GET /metrics` in Prometheus' text format or OpenMetrics: the counted metrics the
//! pipeline keeps ([`chainsieve_runtime::metrics`]), and what is a state rather than a
//! count (connections closed too slow, malformed upstream objects skipped,
//! history streams running, subscriptions, a source's health, a filter's
//! failures), read from the server when scraped.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::exposition;
use crate::state::AppState;
use chainsieve_keys::Keys;
use chainsieve_model::SourceState;
use chainsieve_node::NodeState;
use chainsieve_node::health::lag;
use chainsieve_runtime::metrics::{ChainLabel, NodeLabels, TopicLabels};
use chainsieve_runtime::tasks::Tasks;
use chainsieve_usage::Counts;
use chainsieve_watchlists::Watchlists;
use chainsieve_webhook::Webhooks;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeStateLabels {
    chain: String,
    node: String,
    state: String,
}
use chainsieve_model::wire;

/// `GET /metrics`, in the format the scraper asks for
/// ([`super::exposition`]).
pub async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let registry = scrape(&state);
    let mut text = String::new();
    if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &registry) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics failed: {error}"),
        )
            .into_response();
    }
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok());
    if exposition::wants_open_metrics(accept) {
        ([(header::CONTENT_TYPE, exposition::OPEN_METRICS)], text).into_response()
    } else {
        let text = exposition::text_format(&text);
        ([(header::CONTENT_TYPE, exposition::TEXT)], text).into_response()
    }
}

/// A registry of everything, the states read now.
fn scrape(state: &AppState) -> Registry {
    let mut registry = Registry::with_prefix("chainsieve");
    state.metrics.register(&mut registry);
    let closed_slow = Counter::<u64>::default();
    closed_slow.inc_by(state.stats.closed_too_slow());
    registry.register(
        "closed_too_slow",
        "Connections closed because their outbound queue overflowed",
        closed_slow,
    );
    let skipped = Counter::<u64>::default();
    skipped.inc_by(wire::skipped_objects());
    registry.register(
        "upstream_objects_skipped",
        "Malformed transactions and logs from nodes, skipped instead of stopping the chain",
        skipped,
    );
    let history = Gauge::<i64>::default();
    history.set(i64::try_from(state.history_streams.running()).unwrap_or(i64::MAX));
    registry.register(
        "history_streams",
        "History streams reading the nodes now ([history] max_streams)",
        history,
    );
    let subscriptions = Family::<TopicLabels, Gauge>::default();
    let failures = Family::<TopicLabels, Gauge>::default();
    let disabled = Family::<TopicLabels, Gauge>::default();
    let live = Family::<ChainLabel, Gauge>::default();
    let followed = Family::<ChainLabel, Gauge>::default();
    let node_states = Family::<NodeStateLabels, Gauge>::default();
    let node_lag = Family::<NodeLabels, Gauge>::default();
    for (chain, served) in &state.chains {
        if let (Some(pool), Some(_)) = (served.node(), served.node_status()) {
            let tip = served.canonical().tip().map(|b| b.number());
            for (node, state, head) in pool.states() {
                for name in NodeState::NAMES {
                    node_states
                        .get_or_create(&NodeStateLabels {
                            chain: chain.clone(),
                            node: node.clone(),
                            state: name.to_string(),
                        })
                        .set(i64::from(state.name() == name));
                }
                if let (Some(tip), Some(head)) = (tip, head) {
                    node_lag
                        .get_or_create(&NodeLabels {
                            chain: chain.clone(),
                            node,
                        })
                        .set(lag(tip, head));
                }
            }
        }
        live.get_or_create(&ChainLabel {
            chain: chain.clone(),
        })
        .set(i64::from(served.source_status() == SourceState::Live));
        followed
            .get_or_create(&ChainLabel {
                chain: chain.clone(),
            })
            .set(i64::try_from(served.lifecycle_pending()).unwrap_or(i64::MAX));
        for (topic, handle) in served.filters().iter() {
            let labels = TopicLabels {
                chain: chain.clone(),
                topic: topic.clone(),
            };
            let status = handle.status();
            subscriptions
                .get_or_create(&labels)
                .set(i64::try_from(handle.subscriber_count()).unwrap_or(i64::MAX));
            failures
                .get_or_create(&labels)
                .set(i64::try_from(status.failures).unwrap_or(i64::MAX));
            disabled
                .get_or_create(&labels)
                .set(i64::from(status.disabled.is_some()));
        }
    }
    registry.register(
        "subscriptions",
        "Live subscriptions per chain and topic",
        subscriptions,
    );
    registry.register(
        "filter_failures",
        "Failed calls of the topic's current filter component",
        failures,
    );
    registry.register(
        "filter_disabled",
        "1 when the topic's filter was disabled after failing repeatedly",
        disabled,
    );
    registry.register(
        "source_live",
        "1 when the chain's source (devnet or node) is live",
        live,
    );
    registry.register(
        "lifecycle_pending",
        "Pending transactions the chain's lifecycle tracker follows (at most [lifecycle] max_pending)",
        followed,
    );
    registry.register(
        "node_state",
        "1 for each node's current state (connecting, live, lagging, stalled, down, excluded)",
        node_states,
    );
    registry.register(
        "node_head_lag_blocks",
        "How many blocks a node's head is behind the chain's (negative: ahead of it)",
        node_lag,
    );
    if let Some(webhooks) = &state.webhooks {
        register_webhooks(&mut registry, webhooks);
    }
    if let Some(watchlists) = &state.watchlists {
        register_watchlists(&mut registry, watchlists);
    }
    register_keys(&mut registry, &state.keys);
    register_tasks(&mut registry, &state.tasks);
    registry
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    part: String,
    task: String,
}

/// Each supervised task's standing (docs/src/operations.md, Supervision).
fn register_tasks(registry: &mut Registry, tasks: &Tasks) {
    let troubled = Family::<TaskLabels, Gauge>::default();
    let restarts = Family::<TaskLabels, Counter>::default();
    for (part, named) in tasks.standings() {
        for (task, standing) in named {
            let labels = TaskLabels {
                part: part.to_string(),
                task,
            };
            troubled
                .get_or_create(&labels)
                .set(i64::from(standing.trouble.is_some()));
            restarts.get_or_create(&labels).inc_by(standing.restarts);
        }
    }
    registry.register(
        "task_down",
        "1 while the supervised task has stopped (failed, or waiting to be started again)",
        troubled,
    );
    registry.register(
        "task_restarts",
        "Times the supervised task was started again after it stopped",
        restarts,
    );
}

/// A key, by id and name (never its secret).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    key: String,
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyMethodLabels {
    key: String,
    name: String,
    method: String,
}

/// A key's figure: its metric's name and help, and how it is read.
type Figure = (&'static str, &'static str, fn(&Counts) -> u64);

/// What each key used since the server started (its meter's totals).
fn register_keys(registry: &mut Registry, keys: &Keys) {
    let calls = Family::<KeyMethodLabels, Counter>::default();
    let figures: [Figure; 6] = [
        (
            "key_notifications",
            "Notifications taken for the key's WebSockets",
            |c| c.notifications,
        ),
        (
            "key_notification_bytes",
            "Bytes of the notifications taken for the key's WebSockets",
            |c| c.bytes,
        ),
        (
            "key_webhook_deliveries",
            "Webhook deliveries of the key's webhooks the receiver accepted",
            |c| c.webhook_deliveries,
        ),
        (
            "key_webhook_notifications",
            "Notifications in the key's accepted webhook deliveries",
            |c| c.webhook_notifications,
        ),
        (
            "key_webhook_bytes",
            "Bytes of the key's accepted webhook deliveries",
            |c| c.webhook_bytes,
        ),
        (
            "key_history_blocks",
            "Blocks history streams replayed to the key's subscriptions",
            |c| c.history_blocks,
        ),
    ];
    let families: Vec<Family<KeyLabels, Counter>> =
        figures.iter().map(|_| Family::default()).collect();
    for key in keys.all() {
        let Some(meter) = &key.meter else { continue };
        let totals = meter.totals();
        let labels = KeyLabels {
            key: key.id.to_string(),
            name: key.grant().record.name.clone().unwrap_or_default(),
        };
        for (method, count) in &totals.calls {
            calls
                .get_or_create(&KeyMethodLabels {
                    key: labels.key.clone(),
                    name: labels.name.clone(),
                    method: method.clone(),
                })
                .inc_by(*count);
        }
        for ((_, _, figure), family) in figures.iter().zip(&families) {
            family.get_or_create(&labels).inc_by(figure(&totals));
        }
    }
    registry.register(
        "key_calls",
        "JSON-RPC calls each key made, by method",
        calls,
    );
    for ((name, help, _), family) in figures.into_iter().zip(families) {
        registry.register(name, help, family);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

/// The watchlists, the addresses they watch, the edits made, and the
/// changes kept for views before them.
fn register_watchlists(registry: &mut Registry, watchlists: &Watchlists) {
    let figures = watchlists.figures();
    for (name, help, value) in [
        ("watchlists", "Watchlists of every key", figures.watchlists),
        (
            "watchlist_addresses",
            "Distinct addresses in at least one watchlist",
            figures.addresses,
        ),
        (
            "watchlist_unsettled",
            "Watchlist changes kept for views before them (a batch in flight, a chain that has not placed the edit)",
            figures.unsettled,
        ),
    ] {
        let gauge = Gauge::<i64>::default();
        gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        registry.register(name, help, gauge);
    }
    let edits = Counter::<u64>::default();
    edits.inc_by(figures.edits);
    registry.register(
        "watchlist_edits",
        "Watchlist edits applied (the last edit's number)",
        edits,
    );
}

/// Deliveries, failed tries, and per webhook state the webhooks, their
/// backlog and its age.
fn register_webhooks(registry: &mut Registry, webhooks: &Webhooks) {
    let (delivered, failed) = webhooks.totals();
    let deliveries = Counter::<u64>::default();
    deliveries.inc_by(delivered);
    registry.register(
        "webhook_deliveries",
        "Webhook deliveries the receiver accepted (2xx)",
        deliveries,
    );
    let failures = Counter::<u64>::default();
    failures.inc_by(failed);
    registry.register(
        "webhook_failures",
        "Webhook tries that failed (timeouts, connection errors, refusals, subscriptions ended)",
        failures,
    );
    let count = Family::<StateLabel, Gauge>::default();
    let backlog = Family::<StateLabel, Gauge>::default();
    let lag = Family::<StateLabel, Gauge<f64, AtomicU64>>::default();
    for (webhook_state, figures) in webhooks.states() {
        let labels = StateLabel {
            state: webhook_state.name().to_string(),
        };
        count
            .get_or_create(&labels)
            .set(i64::try_from(figures.webhooks).unwrap_or(i64::MAX));
        backlog
            .get_or_create(&labels)
            .set(i64::try_from(figures.backlog).unwrap_or(i64::MAX));
        lag.get_or_create(&labels).set(figures.lag.as_secs_f64());
    }
    registry.register(
        "webhooks",
        "Webhooks per state (active, retrying, failing, paused)",
        count,
    );
    registry.register(
        "webhook_backlog",
        "Notifications waiting to be delivered, per webhook state",
        backlog,
    );
    registry.register(
        "webhook_lag_seconds",
        "How long the oldest waiting notification has waited, the most of any webhook in the state",
        lag,
    );
}
