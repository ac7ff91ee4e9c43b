//! The counted metrics: counters and histograms on the hot paths are
//! `prometheus-client` metrics the chains, filter actors and sessions keep a
//! handle to (an atomic add each). Handles are passed down from the wiring;
//! the `/metrics` endpoint (`chainsieve_http::metrics`) registers them with
//! what it reads of the server's state when scraped.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::queues::Queues;

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub chain: String,
    pub node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub part: String,
    pub queue: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// `match-batch` call times: 1 µs to ~0.5 s.
fn batch_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-6, 2.0, 20))
}

/// Node request times: 100 µs to ~6.5 s.
fn node_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-4, 2.0, 17))
}

/// The server's counted metrics; cloning a family shares it.
#[derive(Debug)]
pub struct Metrics {
    events: Family<StreamLabels, Counter>,
    batch_seconds: HistogramFamily<TopicLabels>,
    notifications: Family<TopicLabels, Counter>,
    connections: Family<ChainLabel, Gauge>,
    node_seconds: HistogramFamily<NodeLabels>,
    node_errors: Family<NodeLabels, Counter>,
    node_wrong_blocks: Family<NodeLabels, Counter>,
    unverified_blocks: Family<ChainLabel, Counter>,
    /// The bounded queues between tasks, read for their depth when
    /// scraped.
    pub queues: Queues,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            events: Family::default(),
            batch_seconds: Family::new_with_constructor(batch_histogram),
            notifications: Family::default(),
            connections: Family::default(),
            node_seconds: Family::new_with_constructor(node_histogram),
            node_errors: Family::default(),
            node_wrong_blocks: Family::default(),
            unverified_blocks: Family::default(),
            queues: Queues::default(),
        }
    }
}

/// The counters one filter actor adds to.
#[derive(Clone, Debug)]
pub struct ActorMetrics {
    pub batch_seconds: Histogram,
    pub notifications: Counter,
}

/// The counters one node of a chain adds to.
#[derive(Clone, Debug)]
pub struct NodeMetrics {
    /// Seconds per answered request batch.
    pub latency: Histogram,
    /// Requests that failed at the transport, timed out or could not be
    /// read (not the node's own error answers).
    pub errors: Counter,
    /// Blocks it served that failed verification.
    pub wrong_blocks: Counter,
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

    pub fn node(&self, chain: &str, node: &str) -> NodeMetrics {
        let labels = NodeLabels {
            chain: chain.into(),
            node: node.into(),
        };
        NodeMetrics {
            latency: self.node_seconds.get_or_create(&labels).clone(),
            errors: self.node_errors.get_or_create(&labels).clone(),
            wrong_blocks: self.node_wrong_blocks.get_or_create(&labels).clone(),
        }
    }

    /// Blocks of `chain` that went out unverified, every node having
    /// served them failing the same check.
    pub fn unverified_blocks(&self, chain: &str) -> Counter {
        self.unverified_blocks
            .get_or_create(&ChainLabel {
                chain: chain.into(),
            })
            .clone()
    }

    /// Open WebSocket connections on `chain`; the caller adds and removes.
    pub fn connections(&self, chain: &str) -> Gauge {
        self.connections
            .get_or_create(&ChainLabel {
                chain: chain.into(),
            })
            .clone()
    }

    /// Adds the counted metrics to a scrape's `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "events_ingested",
            "Events handed to the filters, per chain and stream",
            self.events.clone(),
        );
        registry.register(
            "filter_batch_seconds",
            "Time of one match-batch call into a filter component",
            self.batch_seconds.clone(),
        );
        registry.register(
            "notifications_sent",
            "Notifications queued to subscribers",
            self.notifications.clone(),
        );
        registry.register(
            "connections",
            "Open WebSocket connections",
            self.connections.clone(),
        );
        registry.register(
            "node_request_seconds",
            "Time of one answered request batch to a node",
            self.node_seconds.clone(),
        );
        registry.register(
            "node_errors",
            "Requests to a node that failed at the transport, timed out or could not be read",
            self.node_errors.clone(),
        );
        registry.register(
            "node_wrong_blocks",
            "Blocks a node served that failed verification",
            self.node_wrong_blocks.clone(),
        );
        registry.register(
            "unverified_blocks",
            "Blocks that went out unverified: every node served them failing the same check",
            self.unverified_blocks.clone(),
        );
        let depth = Family::<QueueLabels, Gauge>::default();
        let capacity = Family::<QueueLabels, Gauge>::default();
        for (name, now) in self.queues.depths() {
            let labels = QueueLabels {
                part: name.part,
                queue: name.queue.to_string(),
            };
            depth
                .get_or_create(&labels)
                .set(i64::try_from(now.queued).unwrap_or(i64::MAX));
            capacity
                .get_or_create(&labels)
                .set(i64::try_from(now.capacity).unwrap_or(i64::MAX));
        }
        registry.register(
            "queue_depth",
            "Items waiting in a bounded queue between tasks (its sender waits when it is full)",
            depth,
        );
        registry.register(
            "queue_capacity",
            "The bound of a queue between tasks",
            capacity,
        );
    }
}
