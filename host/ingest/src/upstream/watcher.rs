//! One node, watched: a session per connection checks `eth_chainId`,
//! subscribes to heads and pending transactions, reports the node's latest
//! head, then passes on what the node announces, until the connection
//! fails; then it reconnects with backoff. It fetches nothing else: the
//! chain's ingest decides what to fetch, and from which node.

use std::time::Duration;

use alloy_primitives::{B256, U64};
use backon::{BackoffBuilder, ExponentialBuilder};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use chainsieve_node::{NodeClient, NodeError, Notification, decode};

/// How long the node may stay silent before it is asked whether it is
/// still there (it fails the session if it does not answer in time).
const IDLE_PROBE: Duration = Duration::from_secs(30);

/// The first delay before reconnecting; it doubles (with jitter) per
/// failed attempt up to [`MAX_RETRY`].
const MIN_RETRY: Duration = Duration::from_millis(250);
const MAX_RETRY: Duration = Duration::from_secs(30);

/// The part of a head needed to place and fetch its block.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HeadRef {
    pub hash: B256,
    pub number: U64,
    pub parent_hash: B256,
}

/// What a node said, tagged with the node's index in the pool.
#[derive(Debug)]
pub enum NodeEvent {
    /// Subscribed; `full_pending`: it sends whole pending transactions,
    /// not only their hashes.
    Up {
        node: usize,
        full_pending: bool,
    },
    Head {
        node: usize,
        head: HeadRef,
    },
    /// Pending transactions (objects or hashes, as `Up` said), in order.
    Pending {
        node: usize,
        announced: Vec<Box<RawValue>>,
    },
    Down {
        node: usize,
        reason: String,
    },
}

/// Which node, for which chain.
#[derive(Clone, Debug)]
pub struct Watched {
    pub node: usize,
    pub name: String,
    pub url: String,
    pub chain: String,
    pub chain_id: u64,
}

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error("the node reports chain id {found}, but this chain is configured with {expected}")]
    WrongChain { expected: u64, found: u64 },
    /// The receiver is gone: the server is stopping.
    #[error("the server is stopping")]
    Stopping,
}

/// Watches the node until `shutdown`, reconnecting with backoff. A failure
/// is reported once per reason, not per retry.
pub async fn watch(node: Watched, events: mpsc::Sender<NodeEvent>, shutdown: CancellationToken) {
    let mut retries = retry_delays();
    let mut down_since: Option<String> = None;
    loop {
        let mut live = false;
        let result = tokio::select! {
            () = shutdown.cancelled() => return,
            result = session(&node, &events, &mut live) => result,
        };
        let error = match result {
            Err(SessionError::Stopping) => return,
            Err(error) => error,
        };
        if live {
            retries = retry_delays();
        }
        let reason = error.to_string();
        if down_since.as_deref() != Some(reason.as_str()) || live {
            let down = NodeEvent::Down {
                node: node.node,
                reason: reason.clone(),
            };
            if events.send(down).await.is_err() {
                return;
            }
            down_since = Some(reason);
        } else {
            tracing::debug!(chain = %node.chain, node = %node.name, %reason, "node still down");
        }
        let delay = retries.next().unwrap_or(MAX_RETRY);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

fn retry_delays() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(MIN_RETRY)
        .with_max_delay(MAX_RETRY)
        .with_jitter()
        .without_max_times()
        .build()
}

/// The subscriptions of one session.
struct Subscriptions {
    heads: String,
    pending: String,
}

/// One connection, from connect to failure. Sets `live` once subscribed.
async fn session(
    node: &Watched,
    events: &mpsc::Sender<NodeEvent>,
    live: &mut bool,
) -> Result<std::convert::Infallible, SessionError> {
    let send = |event| async { events.send(event).await.map_err(|_| SessionError::Stopping) };
    let (client, mut notifications) = NodeClient::connect(&node.url).await?;
    let found: U64 = client.call("eth_chainId", json!([])).await?;
    if found.to::<u64>() != node.chain_id {
        return Err(SessionError::WrongChain {
            expected: node.chain_id,
            found: found.to(),
        });
    }
    let (subs, full_pending) = subscribe(&client).await?;
    *live = true;
    send(NodeEvent::Up {
        node: node.node,
        full_pending,
    })
    .await?;
    // Where the node stands now, rather than at its next head: after a
    // reconnect the gap is filled before anything new is followed.
    let latest: Option<HeadRef> = client
        .call("eth_getBlockByNumber", json!(["latest", false]))
        .await?;
    if let Some(head) = latest {
        send(NodeEvent::Head {
            node: node.node,
            head,
        })
        .await?;
    }
    loop {
        let first = match tokio::time::timeout(IDLE_PROBE, notifications.recv()).await {
            Ok(Some(first)) => first,
            Ok(None) => return Err(NodeError::Closed.into()),
            // A connection that died without closing looks just like a
            // quiet node: ask something, and fail if nothing answers.
            Err(_) => {
                client.call::<U64>("eth_chainId", json!([])).await?;
                continue;
            }
        };
        // Everything already queued: pending transactions go as one batch,
        // in order with the heads between them.
        let mut announced = Vec::new();
        let mut next = Some(first);
        while let Some(Notification {
            subscription,
            result,
        }) = next.take()
        {
            if subscription == subs.heads {
                if !announced.is_empty() {
                    let batch = std::mem::take(&mut announced);
                    send(pending(node.node, batch)).await?;
                }
                let head: HeadRef = decode("newHeads", &result)?;
                send(NodeEvent::Head {
                    node: node.node,
                    head,
                })
                .await?;
            } else if subscription == subs.pending {
                announced.push(result);
            }
            next = notifications.try_recv().ok();
        }
        if !announced.is_empty() {
            send(pending(node.node, announced)).await?;
        }
    }
}

fn pending(node: usize, announced: Vec<Box<RawValue>>) -> NodeEvent {
    NodeEvent::Pending { node, announced }
}

/// Subscribes to heads and pending transactions, full objects if the node
/// offers them (then `true`), hashes otherwise.
async fn subscribe(client: &NodeClient) -> Result<(Subscriptions, bool), SessionError> {
    let heads: String = client.call("eth_subscribe", json!(["newHeads"])).await?;
    let (pending, full) = match client
        .call::<String>("eth_subscribe", json!(["newPendingTransactions", true]))
        .await
    {
        Ok(id) => (id, true),
        Err(NodeError::Rpc { .. }) => (
            client
                .call("eth_subscribe", json!(["newPendingTransactions"]))
                .await?,
            false,
        ),
        Err(other) => return Err(other.into()),
    };
    Ok((Subscriptions { heads, pending }, full))
}
