//! A chain's nodes, each with its request connection and its health, and
//! the rule for which node a call goes to (docs/src/nodes.md, Calls):
//! nodes whose heads count and that hold the block the call names come
//! first, in the configured order; a call that fails at the transport or
//! times out is tried once more on the next. Every part that asks the
//! chain's nodes something goes through here: the ingest's fetches
//! ([`NodePool::node`], one node at a time, its own failover), forwarded
//! calls, and the price index's calls and backfill.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::sync::watch;

use super::client::CALL_TIMEOUT;
use super::health::{Health, NodeState};
use super::{Call, NodeConnection, NodeError, single};
use crate::config::NodeSpec;
use crate::metrics::{Metrics, NodeMetrics};

/// One node of the chain.
#[derive(Debug)]
pub struct PoolNode {
    pub spec: NodeSpec,
    connection: NodeConnection,
    /// Written by the chain's ingest as heads and failures come in, read by
    /// calls, `/readyz` and `/metrics`. A std mutex: held to read or update
    /// the record, never across an await.
    health: Mutex<Health>,
    pub metrics: NodeMetrics,
}

impl PoolNode {
    fn new(spec: NodeSpec, metrics: NodeMetrics) -> Self {
        Self {
            connection: NodeConnection::new(spec.url.clone()),
            spec,
            health: Mutex::new(Health::default()),
            metrics,
        }
    }

    /// The node's record, to read or update.
    pub fn health(&self) -> MutexGuard<'_, Health> {
        // A poisoned record is still the latest one written.
        self.health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `calls` as one batch to this node, within `timeout`, timed and
    /// counted.
    pub async fn batch_within(
        &self,
        calls: &[Call],
        timeout: Duration,
    ) -> Result<Vec<Box<RawValue>>, NodeError> {
        let started = Instant::now();
        let answered = self.connection.batch_within(calls, timeout).await;
        match &answered {
            Ok(_) | Err(NodeError::Rpc { .. }) => {
                self.metrics
                    .latency
                    .observe(started.elapsed().as_secs_f64());
            }
            Err(_) => {
                self.metrics.errors.inc();
            }
        }
        answered
    }

    /// Whether a call naming block `at` can go here first.
    fn serves(&self, at: Option<u64>) -> bool {
        let health = self.health();
        health.state().counts() && at.is_none_or(|at| health.head().is_none_or(|head| head >= at))
    }
}

/// The nodes of one chain.
#[derive(Debug)]
pub struct NodePool {
    chain: String,
    nodes: Vec<PoolNode>,
    /// Blocks that went out unverified: every node served them failing the
    /// same check.
    pub unverified_blocks: Counter,
    /// Counts the nodes' state changes, so a watcher (a test, an operator
    /// view) wakes on each instead of polling.
    changes: watch::Sender<u64>,
}

impl NodePool {
    pub fn new(chain: &str, specs: &[NodeSpec], metrics: &Metrics) -> Self {
        Self {
            chain: chain.to_string(),
            nodes: specs
                .iter()
                .map(|spec| PoolNode::new(spec.clone(), metrics.node(chain, &spec.name)))
                .collect(),
            unverified_blocks: metrics.unverified_blocks(chain),
            changes: watch::Sender::new(0),
        }
    }

    /// Says a node's state changed (see [`NodePool::changes`]).
    pub fn changed(&self) {
        self.changes.send_modify(|count| *count += 1);
    }

    /// Wakes on every change of a node's state.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub fn chain(&self) -> &str {
        &self.chain
    }

    pub fn nodes(&self) -> &[PoolNode] {
        &self.nodes
    }

    pub fn node(&self, index: usize) -> &PoolNode {
        &self.nodes[index]
    }

    /// The nodes in the order a call naming block `at` tries them: those
    /// whose heads count and that hold it, then the rest (a node's state
    /// may be stale, and any answer beats none).
    fn order(&self, at: Option<u64>) -> impl Iterator<Item = &PoolNode> {
        let (first, rest): (Vec<_>, Vec<_>) = self.nodes.iter().partition(|n| n.serves(at));
        first.into_iter().chain(rest)
    }

    /// Sends `calls` as one batch to the first node that serves block `at`
    /// (any, if `None`), within `timeout`; a failure other than the node's
    /// own error answer is tried once more on the next node.
    pub async fn batch_at(
        &self,
        calls: &[Call],
        at: Option<u64>,
        timeout: Duration,
    ) -> Result<Vec<Box<RawValue>>, NodeError> {
        let mut order = self.order(at);
        let first = order.next().ok_or(NodeError::Closed)?;
        match first.batch_within(calls, timeout).await {
            Err(error) if !matches!(error, NodeError::Rpc { .. }) => match order.next() {
                Some(second) => {
                    tracing::debug!(chain = %self.chain, node = %first.spec.name, %error, retry = %second.spec.name, "call failed; trying another node");
                    second.batch_within(calls, timeout).await
                }
                None => Err(error),
            },
            answered => answered,
        }
    }

    /// [`NodePool::batch_at`] for calls that name no block.
    pub async fn batch(&self, calls: &[Call]) -> Result<Vec<Box<RawValue>>, NodeError> {
        self.batch_at(calls, None, CALL_TIMEOUT).await
    }

    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &'static str,
        params: serde_json::Value,
    ) -> Result<T, NodeError> {
        single(method, self.batch(&[Call::new(method, params)]).await?)
    }

    /// Whether any node's heads count.
    pub fn any_counts(&self) -> bool {
        self.nodes.iter().any(|n| n.health().state().counts())
    }

    /// Each node's name and state, for `/readyz`.
    pub fn states(&self) -> Vec<(String, NodeState, Option<u64>)> {
        self.nodes
            .iter()
            .map(|n| {
                let health = n.health();
                (n.spec.name.clone(), health.state().clone(), health.head())
            })
            .collect()
    }
}
