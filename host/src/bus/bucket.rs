//! Reading the bus's KV buckets (webhooks, keys): each request bounded in
//! time, so a bus that stops answering fails the call that waited rather
//! than hanging it.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::kv;
use futures_util::StreamExt as _;

/// How long a request to a bucket may wait.
pub const ATTEMPT: Duration = Duration::from_secs(5);

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
