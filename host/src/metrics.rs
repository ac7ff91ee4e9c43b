//! `/metrics` in Prometheus' text format. Counters and histograms on the hot
//! paths are `prometheus-client` metrics the chains and filter actors keep a
//! handle to (an atomic add each); what is a state rather than a count
//! (connections, subscriptions, a source's health, a filter's failures) is
//! read from the server when scraped.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::ingest::upstream::UpstreamStatus;
use crate::server::AppState;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChainLabel {
    pub chain: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabels {
    pub chain: String,
    pub stream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabels {
    pub chain: String,
    pub topic: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// `match-batch` call times: 1 µs to ~0.5 s.
fn batch_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-6, 2.0, 20))
}

/// The server's counted metrics; cloning a family shares it.
#[derive(Debug)]
pub struct Metrics {
    events: Family<StreamLabels, Counter>,
    batch_seconds: HistogramFamily<TopicLabels>,
    notifications: Family<TopicLabels, Counter>,
    connections: Family<ChainLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            events: Family::default(),
            batch_seconds: Family::new_with_constructor(batch_histogram),
            notifications: Family::default(),
            connections: Family::default(),
        }
    }
}

/// The counters one filter actor adds to.
#[derive(Clone, Debug)]
pub struct ActorMetrics {
    pub batch_seconds: Histogram,
    pub notifications: Counter,
}

impl Metrics {
    /// Events of `stream` ingested on `chain`.
    pub fn events(&self, chain: &str, stream: &str) -> Counter {
        self.events
            .get_or_create(&StreamLabels {
                chain: chain.into(),
                stream: stream.into(),
            })
            .clone()
    }

    pub fn actor(&self, chain: &str, topic: &str) -> ActorMetrics {
        let labels = TopicLabels {
            chain: chain.into(),
            topic: topic.into(),
        };
        ActorMetrics {
            batch_seconds: self.batch_seconds.get_or_create(&labels).clone(),
            notifications: self.notifications.get_or_create(&labels).clone(),
        }
    }

    /// Open WebSocket connections on `chain`; the caller adds and removes.
    pub fn connections(&self, chain: &str) -> Gauge {
        self.connections
            .get_or_create(&ChainLabel {
                chain: chain.into(),
            })
            .clone()
    }
}

/// `GET /metrics`.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let registry = scrape(&state);
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics failed: {error}"),
        )
            .into_response(),
    }
}

/// A registry of everything, the states read now.
fn scrape(state: &AppState) -> Registry {
    let metrics = &state.metrics;
    let mut registry = Registry::with_prefix("chainsieve");
    registry.register(
        "events_ingested",
        "Events handed to the filters, per chain and stream",
        metrics.events.clone(),
    );
    registry.register(
        "filter_batch_seconds",
        "Time of one match-batch call into a filter component",
        metrics.batch_seconds.clone(),
    );
    registry.register(
        "notifications_sent",
        "Notifications queued to subscribers",
        metrics.notifications.clone(),
    );
    registry.register(
        "connections",
        "Open WebSocket connections",
        metrics.connections.clone(),
    );
    let closed_slow = Counter::<u64>::default();
    closed_slow.inc_by(state.stats.closed_too_slow());
    registry.register(
        "closed_too_slow",
        "Connections closed because their outbound queue overflowed",
        closed_slow,
    );
    let subscriptions = Family::<TopicLabels, Gauge>::default();
    let failures = Family::<TopicLabels, Gauge>::default();
    let disabled = Family::<TopicLabels, Gauge>::default();
    let live = Family::<ChainLabel, Gauge>::default();
    for (chain, served) in &state.chains {
        live.get_or_create(&ChainLabel {
            chain: chain.clone(),
        })
        .set(i64::from(served.source_status() == UpstreamStatus::Live));
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
    registry
}
