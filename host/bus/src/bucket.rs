//! Reading the bus's KV buckets and object store (webhooks, keys, usage,
//! uploads): each request bounded in time, so a bus that stops answering
//! fails the call that waited rather than hanging it; a watch started
//! again when it fails.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::kv;
use futures_util::StreamExt as _;

/// How long a request to a bucket may wait.
pub const ATTEMPT: Duration = Duration::from_secs(5);

/// The pause before watching again after a watch failed or ended.
const REWATCH: Duration = Duration::from_millis(250);

/// Runs `watch` (which sends what it sees on `changes`) and runs it again
/// after it fails or ends, until `changes`' receiver is dropped; `what`
/// names it in the log.
pub async fn rewatch<T, F>(
    changes: &tokio::sync::mpsc::Sender<T>,
    what: &str,
    mut watch: impl FnMut() -> F,
) where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    loop {
        tokio::select! {
            () = changes.closed() => return,
            watched = watch() => {
                if let Err(error) = watched {
                    tracing::debug!(error = format!("{error:#}"), what, "watching again");
                }
            }
        }
        if changes.is_closed() {
            return;
        }
        tokio::time::sleep(REWATCH).await;
    }
}

/// Every key `bucket` holds now (`what` names them in errors).
pub async fn keys(bucket: &kv::Store, what: &str) -> anyhow::Result<Vec<String>> {
    tokio::time::timeout(ATTEMPT, async {
        let keys = bucket.keys().await?;
        anyhow::Ok(
            keys.filter_map(|key| async move { key.ok() })
                .collect::<Vec<String>>()
                .await,
        )
    })
    .await
    .with_context(|| format!("listing the {what}: no answer"))?
    .with_context(|| format!("listing the {what}"))
}
