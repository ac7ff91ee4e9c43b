//! The forwarding benchmark's engine (`cargo bench -p chainsieve-tests
//! --bench forward`; a small run is in the test command): one JSON-RPC
//! method called at a fixed rate over one WebSocket, as a bot's provider
//! does, each call timed from when it was due to its answer. Sending on a
//! schedule rather than after each answer keeps a slow answer from hiding
//! the ones it delayed (no coordinated omission).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use crate::TIMEOUT;

/// What one run of calls measured.
#[derive(Debug)]
pub struct Calls {
    /// Microseconds from each call's due time to its answer.
    pub latency: Histogram<u64>,
    /// Answers that were errors (counted in `latency` too).
    pub errors: u64,
    /// The first error answer, to say what went wrong.
    pub first_error: Option<Value>,
    /// Every answer's `result`, by call; a run checks them against the
    /// node's.
    pub results: Vec<Value>,
}

impl Calls {
    /// Adds a later run of the same calls.
    pub fn merge(&mut self, later: Calls) -> anyhow::Result<()> {
        self.latency
            .add(&later.latency)
            .context("merging latencies")?;
        self.errors += later.errors;
        if self.first_error.is_none() {
            self.first_error = later.first_error;
        }
        self.results.extend(later.results);
        Ok(())
    }
}

/// Calls `method` with `params` `rate` times a second for `duration` over
/// one WebSocket to `url`, then waits for every answer.
pub async fn run(
    url: &str,
    method: &str,
    params: &Value,
    rate: u64,
    duration: Duration,
) -> anyhow::Result<Calls> {
    let count = (rate as u128 * duration.as_millis() / 1_000) as usize;
    anyhow::ensure!(count > 0, "no call in {duration:?} at {rate}/s");
    let period = Duration::from_secs(1) / u32::try_from(rate.max(1)).context("rate")?;
    let (socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let (mut sink, mut stream) = socket.split();
    let start = Instant::now() + period;
    let due = move |id: usize| start + period * u32::try_from(id).unwrap_or(u32::MAX);
    let params = params.to_string();
    let sender = async move {
        for id in 0..count {
            tokio::time::sleep_until(due(id).into()).await;
            let frame =
                format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
            sink.send(Message::text(frame))
                .await
                .context("sending a call")?;
        }
        anyhow::Ok(sink)
    };
    let receiver = async {
        let mut latency =
            Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).context("histogram")?;
        let mut results = vec![Value::Null; count];
        let (mut answered, mut errors, mut first_error) = (0, 0, None);
        while answered < count {
            let message = tokio::time::timeout(TIMEOUT, stream.next())
                .await
                .context("an answer took too long")?;
            let text = match message {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(frame))) => bail!("closed by the server: {frame:?}"),
                Some(Ok(_)) => continue,
                Some(Err(error)) => bail!("the socket failed: {error}"),
                None => bail!("the socket ended"),
            };
            let received = Instant::now();
            let mut answer: Value = serde_json::from_str(&text).context("an answer")?;
            let id = answer["id"]
                .as_u64()
                .and_then(|id| usize::try_from(id).ok())
                .filter(|id| *id < count)
                .with_context(|| format!("an answer to no call: {answer}"))?;
            latency
                .saturating_record(received.saturating_duration_since(due(id)).as_micros() as u64);
            if answer.get("error").is_some() {
                errors += 1;
                first_error.get_or_insert_with(|| answer.clone());
            }
            results[id] = answer["result"].take();
            answered += 1;
        }
        anyhow::Ok(Calls {
            latency,
            errors,
            first_error,
            results,
        })
    };
    let (sent, calls) = tokio::try_join!(sender, receiver)?;
    drop(sent);
    Ok(calls)
}
