//! Requests to a node over one connection of their own, apart from the
//! source's subscription: opened on first use, reopened after a failure,
//! and shared by every caller at once (the socket is multiplexed by id), so
//! a slow call holds up no other.

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::sync::Mutex;

use super::client::{CALL_TIMEOUT, Call, NodeClient, NodeError, single};

#[derive(Debug)]
pub struct NodeConnection {
    url: String,
    /// The open connection. A mutex so callers take turns (re)connecting;
    /// it is held only to take a handle, never across a call.
    client: Mutex<Option<Arc<NodeClient>>>,
}

impl NodeConnection {
    pub fn new(url: String) -> Self {
        Self {
            url,
            client: Mutex::new(None),
        }
    }

    /// The node's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Sends `calls` as one batch (see [`NodeClient::batch`]). A failure
    /// other than the node's own error answer drops the connection, so the
    /// next call opens a new one.
    pub async fn batch(&self, calls: &[Call]) -> Result<Vec<Box<RawValue>>, NodeError> {
        self.batch_within(calls, CALL_TIMEOUT).await
    }

    /// [`NodeConnection::batch`], waiting at most `timeout` in all: for a
    /// turn at the connection, for (re)connecting, and for the answer. A
    /// node that does not answer in time is taken for hung (the socket may
    /// stay open), so the connection is dropped with what waits on it. The
    /// connecting counts too: a stopped node's kernel still accepts the TCP
    /// connection and the handshake then never ends, and callers queued
    /// behind one another's connect would wait one connect timeout each.
    pub async fn batch_within(
        &self,
        calls: &[Call],
        timeout: Duration,
    ) -> Result<Vec<Box<RawValue>>, NodeError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let timed_out = || NodeError::Timeout {
            method: calls.first().map_or("batch", |c| &c.method).to_string(),
        };
        let client = tokio::time::timeout_at(deadline, self.open())
            .await
            .map_err(|_| timed_out())??;
        let result = tokio::time::timeout_at(deadline, client.batch(calls))
            .await
            .unwrap_or_else(|_| Err(timed_out()));
        if matches!(&result, Err(e) if !matches!(e, NodeError::Rpc { .. })) {
            let mut slot = self.client.lock().await;
            // Unless another caller has already reconnected.
            if slot
                .as_ref()
                .is_some_and(|current| Arc::ptr_eq(current, &client))
            {
                *slot = None;
            }
        }
        result
    }

    /// The open connection, or a new one. Cancel-safe: a caller whose time
    /// runs out while connecting leaves the slot empty for the next.
    async fn open(&self) -> Result<Arc<NodeClient>, NodeError> {
        let mut slot = self.client.lock().await;
        match &*slot {
            // A connection whose socket task has ended is not reused.
            Some(client) if !client.is_closed() => Ok(client.clone()),
            _ => {
                // Boxed: connecting (a TLS and WebSocket handshake) is a
                // ~4 KiB future, taken once a connection, and every call's
                // future would carry it inline: a hedged read three times,
                // and every request's future on a connection that forwards.
                let (client, _notifications) = Box::pin(NodeClient::connect(&self.url)).await?;
                let client = Arc::new(client);
                *slot = Some(client.clone());
                Ok(client)
            }
        }
    }

    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &'static str,
        params: serde_json::Value,
    ) -> Result<T, NodeError> {
        single(method, self.batch(&[Call::new(method, params)]).await?)
    }
}
