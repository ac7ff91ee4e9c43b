//! A chain's nodes, each with its request connection and its health, and
//! the rule for which node a call goes to (docs/src/nodes.md, Calls):
//! nodes whose heads count and that hold the block the call names come
//! first, in the configured order; a call that fails at the transport or
//! times out is tried once more on the next. Every part that asks the
//! chain's nodes something goes through here: the ingest's fetches
//! ([`NodePool::node`], one node at a time, its own failover), forwarded
//! calls, and the price index's calls and backfill.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, watch};

use super::client::CALL_TIMEOUT;
use super::health::{Health, NodeState};
use super::{Call, NodeConnection, NodeError, single};
use chainsieve_config::NodeSpec;
use chainsieve_runtime::metrics::{Metrics, NodeMetrics};

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
}

/// The block a read names, which decides the nodes that can answer it
/// (see [`NodePool::order`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// No block (or one every node has): any node.
    Any,
    /// The chain's tip (`latest`, `pending`), at this height.
    Tip(u64),
    /// This block, by number or by a hash the chain holds.
    Block(u64),
}

impl At {
    fn height(self) -> Option<u64> {
        match self {
            At::Any => None,
            At::Tip(height) | At::Block(height) => Some(height),
        }
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
    /// whose heads count and that hold the block first, then those that
    /// hold it by their last head, in the configured order, then those
    /// below it, highest first. A node known to be below a block named by
    /// number is never asked while one holds it (its `null` would deny a
    /// block the chain has); for the tip it is asked last (its own latest
    /// is better than no answer when the nodes at the tip have just died).
    pub fn order(&self, at: At) -> Vec<&PoolNode> {
        let tier = |node: &PoolNode| {
            let health = node.health();
            let holds = match (at.height(), health.head()) {
                (None, _) => true,
                (Some(at), Some(head)) => head >= at,
                (Some(_), None) => false,
            };
            match (holds, health.state().counts()) {
                (true, true) => 0,
                (true, false) => 1,
                (false, _) => 2,
            }
        };
        let mut order: Vec<(u8, &PoolNode)> = self.nodes.iter().map(|n| (tier(n), n)).collect();
        // Stable: within the first two tiers, the configured order.
        order.sort_by_key(|(tier, node)| {
            (
                *tier,
                (*tier == 2).then(|| std::cmp::Reverse(node.health().head())),
            )
        });
        if matches!(at, At::Block(_)) && order.first().is_some_and(|(tier, _)| *tier < 2) {
            order.retain(|(tier, _)| *tier < 2);
        }
        order.into_iter().map(|(_, node)| node).collect()
    }

    /// Sends `calls` as one batch to the first node [`NodePool::order`]
    /// gives for block `at`, within `timeout` in all. A failure other than
    /// the node's own error answer moves on to the next node; each node
    /// may take half the time when there is another to ask. With `hedge`,
    /// the next node is asked too if the first has not answered after that
    /// long, and the first answer wins (reads only).
    pub async fn batch_at(
        &self,
        calls: &[Call],
        at: At,
        timeout: Duration,
        hedge: Option<Duration>,
    ) -> Result<Vec<Box<RawValue>>, NodeError> {
        let order = self.order(at);
        let deadline = Instant::now() + timeout;
        let per_node = if order.len() > 1 {
            timeout / 2
        } else {
            timeout
        };
        let mut nodes = order.into_iter().peekable();
        let mut failed = NodeError::Closed;
        while let Some(node) = nodes.next() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let within = per_node.min(left);
            let answer = match (hedge.filter(|delay| *delay < within), nodes.peek()) {
                (Some(delay), Some(&next)) => {
                    nodes.next();
                    hedged(node, next, calls, delay, within).await
                }
                _ => node.batch_within(calls, within).await,
            };
            match answer {
                Err(error) if !matches!(error, NodeError::Rpc { .. }) => {
                    tracing::debug!(chain = %self.chain, node = %node.spec.name, %error, "call failed; trying another node");
                    failed = error;
                }
                answer => return answer,
            }
        }
        Err(failed)
    }

    /// Sends `calls` (a write: a signed transaction) to every node whose
    /// heads count (every node, if none does), at once. The first success
    /// answers; failing that, a node's own error answer (say, a nonce too
    /// low), else the first failure. Each send runs to its end on its own
    /// task, so every node gets the transaction even after one answered.
    /// Never retried: a transaction is sent once to each node.
    pub async fn broadcast(
        self: &Arc<Self>,
        calls: &[Call],
        timeout: Duration,
    ) -> Result<Vec<Box<RawValue>>, NodeError> {
        let counting: Vec<usize> = (0..self.nodes.len())
            .filter(|&n| self.nodes[n].health().state().counts())
            .collect();
        let targets = if counting.is_empty() {
            (0..self.nodes.len()).collect()
        } else {
            counting
        };
        let (answered, mut answers) = mpsc::unbounded_channel();
        for node in targets {
            let (pool, calls, answered) = (self.clone(), calls.to_vec(), answered.clone());
            tokio::spawn(async move {
                let answer = pool.nodes[node].batch_within(&calls, timeout).await;
                let _ = answered.send(answer);
            });
        }
        drop(answered);
        let mut refused: Option<NodeError> = None;
        let mut failed: Option<NodeError> = None;
        while let Some(answer) = answers.recv().await {
            match answer {
                Ok(answer) => return Ok(answer),
                Err(error @ NodeError::Rpc { .. }) => {
                    refused.get_or_insert(error);
                }
                Err(error) => {
                    failed.get_or_insert(error);
                }
            }
        }
        Err(refused.or(failed).unwrap_or(NodeError::Closed))
    }

    /// [`NodePool::batch_at`] for calls that name no block.
    pub async fn batch(&self, calls: &[Call]) -> Result<Vec<Box<RawValue>>, NodeError> {
        self.batch_at(calls, At::Any, CALL_TIMEOUT, None).await
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

/// Asks `first`, and `second` too if `first` has not answered after
/// `delay`; the first answer wins, a transport failure waits for the
/// other.
async fn hedged(
    first: &PoolNode,
    second: &PoolNode,
    calls: &[Call],
    delay: Duration,
    within: Duration,
) -> Result<Vec<Box<RawValue>>, NodeError> {
    let asked = first.batch_within(calls, within);
    tokio::pin!(asked);
    let failed = |answer: &Result<_, NodeError>| matches!(answer, Err(error) if !matches!(error, NodeError::Rpc { .. }));
    tokio::select! {
        answer = &mut asked => {
            return if failed(&answer) {
                second.batch_within(calls, within).await
            } else {
                answer
            };
        }
        () = tokio::time::sleep(delay) => {}
    }
    let hedge = second.batch_within(calls, within - delay);
    tokio::pin!(hedge);
    tokio::select! {
        answer = &mut asked => if failed(&answer) { hedge.await } else { answer },
        answer = &mut hedge => if failed(&answer) { asked.await } else { answer },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rules;

    fn names<'a>(order: &[&'a PoolNode]) -> Vec<&'a str> {
        order.iter().map(|n| n.spec.name.as_str()).collect()
    }

    #[test]
    fn a_call_goes_first_to_a_counting_node_that_holds_its_block() {
        let specs: Vec<NodeSpec> = ["low", "high", "gone"]
            .iter()
            .enumerate()
            .map(|(port, name)| NodeSpec::new(*name, format!("ws://127.0.0.1:{}", port + 1)))
            .collect();
        let pool = NodePool::new("test", &specs, &Metrics::default());
        let rules = Rules {
            lag_blocks: 100,
            stall_after: Duration::from_secs(1),
            rejoin_heads: 1,
        };
        let now = std::time::Instant::now();
        for (node, head) in [(0, 5), (1, 10), (2, 10)] {
            pool.node(node)
                .health()
                .on_head(head, Some(10), false, &rules, now);
        }
        pool.node(2).health().on_down("closed".into());
        assert_eq!(names(&pool.order(At::Any)), ["low", "high", "gone"]);
        assert_eq!(
            names(&pool.order(At::Block(8))),
            ["high", "gone"],
            "never a node known to be below the block"
        );
        assert_eq!(
            names(&pool.order(At::Tip(8))),
            ["high", "gone", "low"],
            "the tip: a node below it last"
        );
        assert_eq!(
            names(&pool.order(At::Block(20))),
            ["high", "gone", "low"],
            "ahead of every node: the highest answer"
        );
    }
}
