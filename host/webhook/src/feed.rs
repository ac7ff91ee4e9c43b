//! How a webhook gets its notifications: a subscription like a socket's,
//! opened into the webhook's own queue. Opening one is the RPC side's
//! (`eth_subscribe`'s checks, the log's replay, history from the nodes),
//! handed down by the wiring, so this part never reaches up to it.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::definition::Definition;
use chainsieve_fanout::Sink;
use chainsieve_usage::Meter;

/// Opens subscriptions for webhooks.
pub trait Feeds: Send + Sync + 'static {
    /// Opens `definition`'s subscription into `sink`, after `cursor` if it
    /// has delivered one, else from its own options; its notifications
    /// carry the webhook's id.
    fn open<'a>(
        &'a self,
        definition: &'a Definition,
        cursor: Option<&'a str>,
        sink: Sink,
    ) -> BoxFuture<'a, Result<Opened, FeedRefused>>;

    /// What counts the usage of the key whose secret has digest `owner`
    /// (a webhook's deliveries count in its owner's); none by default.
    fn meter_of(&self, owner: &str) -> Option<Arc<Meter>> {
        let _ = owner;
        None
    }

    /// Why the webhooks of the key whose secret has digest `owner` may
    /// deliver no more (it was revoked or expired), if so; a key this
    /// server does not know is let be. None by default.
    fn owner_refusal(&self, owner: &str) -> Option<String> {
        let _ = owner;
        None
    }
}

/// An open subscription; [`Opened::close`] ends it, and so does dropping
/// it (a call or worker cancelled midway leaves no subscription behind).
pub struct Opened(Option<BoxFuture<'static, ()>>);

impl Opened {
    /// `close` ends the subscription when awaited: once done, nothing more
    /// is queued for it.
    pub fn new(close: BoxFuture<'static, ()>) -> Self {
        Self(Some(close))
    }

    pub async fn close(mut self) {
        if let Some(close) = self.0.take() {
            close.await;
        }
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        if let Some(close) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(close);
        }
    }
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Opened")
    }
}

/// Why a subscription was not opened: the JSON-RPC error `eth_subscribe`
/// would have answered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message} ({code})")]
pub struct FeedRefused {
    pub code: i64,
    pub message: String,
}

impl FeedRefused {
    /// Whether trying again later may succeed: not for bad params, nor for
    /// a cursor or block the chain no longer holds.
    pub fn transient(&self) -> bool {
        !matches!(self.code, -32602 | -32001)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// A subscription whose holder is dropped (a call cancelled midway)
    /// is closed all the same.
    #[tokio::test]
    async fn a_dropped_subscription_is_closed() {
        let closed = Arc::new(AtomicBool::new(false));
        let (done, finished) = tokio::sync::oneshot::channel();
        let flag = closed.clone();
        drop(Opened::new(Box::pin(async move {
            flag.store(true, Ordering::SeqCst);
            let _ = done.send(());
        })));
        finished.await.expect("closed");
        assert!(closed.load(Ordering::SeqCst));
    }
}
