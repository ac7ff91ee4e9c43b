//! The drop checker of a chain of nodes: asked about transactions long
//! pending, it asks every node whose heads count whether it still holds
//! each (`eth_getTransactionByHash`, pending or mined), and answers a
//! [`SourceEvent::Dropped`] of those none holds (docs/src/api.md, A
//! transaction's life). A node that cannot answer holds them all: only
//! what every counting node says it lacks is dropped, and nothing while no
//! node counts.

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::B256;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use chainsieve_model::SourceEvent;
use chainsieve_node::{Call, NodePool};

/// Hashes asked of a node in one batch.
const PER_BATCH: usize = 100;

/// How long a node has to answer one batch.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Answers each round of `asks` on `out` until `shutdown` or either side
/// closes.
pub async fn check(
    pool: Arc<NodePool>,
    mut asks: mpsc::Receiver<Vec<B256>>,
    out: mpsc::Sender<SourceEvent>,
    shutdown: CancellationToken,
) {
    loop {
        let hashes = tokio::select! {
            () = shutdown.cancelled() => return,
            asked = asks.recv() => match asked {
                Some(hashes) => hashes,
                None => return,
            },
        };
        let gone = unheld(&pool, &hashes).await;
        if !gone.is_empty() {
            tracing::info!(chain = %pool.chain(), dropped = gone.len(), "pending transactions no node holds");
            if out.send(SourceEvent::Dropped(gone)).await.is_err() {
                return;
            }
        }
    }
}

/// The hashes no counting node holds.
async fn unheld(pool: &NodePool, hashes: &[B256]) -> Vec<B256> {
    let counting: Vec<_> = pool
        .nodes()
        .iter()
        .filter(|node| node.health().state().counts())
        .collect();
    if counting.is_empty() {
        return Vec::new();
    }
    let mut gone = Vec::new();
    for chunk in hashes.chunks(PER_BATCH) {
        let calls: Vec<Call> = chunk
            .iter()
            .map(|hash| Call::new("eth_getTransactionByHash", json!([hash])))
            .collect();
        let mut held = vec![false; chunk.len()];
        for node in &counting {
            match node.batch_within(&calls, CHECK_TIMEOUT).await {
                Ok(answers) if answers.len() == chunk.len() => {
                    for (held, answer) in held.iter_mut().zip(&answers) {
                        *held |= answer.get() != "null";
                    }
                }
                // No answer, or a wrong one: it may hold them all.
                Ok(_) | Err(_) => held.iter_mut().for_each(|held| *held = true),
            }
        }
        gone.extend(
            chunk
                .iter()
                .zip(held)
                .filter(|(_, held)| !held)
                .map(|(hash, _)| *hash),
        );
    }
    gone
}
