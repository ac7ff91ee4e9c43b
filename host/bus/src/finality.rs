//! How far each chain is final, from the leading ingest to the edges
//! (docs/src/api.md, Finality). The ingest writes the marks its pipeline
//! accepted (the block numbers of `safe` and `finalized`) to the key
//! `<chain>` of the KV bucket `<prefix>-finality`, with the position its
//! log had reached; an edge watches the key and raises its own log's marks
//! once its log has reached that position too. The edge's log then holds
//! the same steps, the reorgs that preceded the mark included, so a mark
//! means the same blocks there. Marks only rise, so a stale or repeated
//! value changes nothing.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::kv;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::Bus;
use chainsieve_eventlog::EventLog;
use chainsieve_model::Grade;

/// How long a write or a watch may wait on the bus before it is tried
/// again (a bucket electing a leader answers nothing meanwhile).
const ATTEMPT: Duration = Duration::from_secs(1);

/// The pause before another try after a failure.
const RETRY: Duration = Duration::from_millis(250);

/// How often an edge looks whether its log has reached a mark's position.
const CATCH_UP: Duration = Duration::from_millis(50);

/// The bucket's value for one chain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Marks {
    safe: Option<u64>,
    finalized: Option<u64>,
    /// The writer's log position when the marks held: a reader applies
    /// them once its log is there.
    #[serde(default)]
    at: u64,
}

impl Marks {
    fn of(log: &EventLog) -> Self {
        let finality = log.finality();
        Self {
            safe: finality.safe,
            finalized: finality.finalized,
            at: log.head(),
        }
    }

    /// The same grades, whatever the position.
    fn grades(&self) -> (Option<u64>, Option<u64>) {
        (self.safe, self.finalized)
    }
}

/// The finality bucket of one bus.
#[derive(Clone, Debug)]
pub struct FinalityMarks {
    kv: kv::Store,
}

impl Bus {
    /// The finality bucket, created if it does not exist.
    pub async fn finality(&self) -> anyhow::Result<FinalityMarks> {
        let kv = self.latest_bucket("finality", Duration::ZERO).await?;
        Ok(FinalityMarks { kv })
    }
}

impl FinalityMarks {
    /// Writes `log`'s finality for `chain` each time it rises, until
    /// `shutdown`; a write the bus does not take is tried again.
    pub async fn publish(&self, chain: &str, log: Arc<EventLog>, shutdown: CancellationToken) {
        let mut changes = log.finality_changes();
        let mut written = Marks::default();
        loop {
            changes.borrow_and_update();
            let marks = Marks::of(&log);
            if marks.grades() != written.grades() {
                match self.write(chain, marks).await {
                    Ok(()) => written = marks,
                    Err(error) => {
                        tracing::debug!(%chain, error = format!("{error:#}"), "writing the finality marks failed; trying again");
                        tokio::select! {
                            () = shutdown.cancelled() => return,
                            () = tokio::time::sleep(RETRY) => continue,
                        }
                    }
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
        }
    }

    async fn write(&self, chain: &str, marks: Marks) -> anyhow::Result<()> {
        let value = serde_json::to_vec(&marks).context("encoding the marks")?;
        tokio::time::timeout(ATTEMPT, self.kv.put(chain, value.into()))
            .await
            .context("no answer")?
            .context("the bus refused the marks")?;
        Ok(())
    }

    /// Raises `log`'s finality from the marks written for `chain`, until
    /// `shutdown`; a watch that fails or ends is made again.
    pub async fn follow(&self, chain: &str, log: Arc<EventLog>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                ended = self.watch(chain, &log) => {
                    tracing::debug!(%chain, reason = format!("{ended:#}"), "watching the finality marks again");
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RETRY) => {}
            }
        }
    }

    /// Watches the key from its last value on; returns why it stopped.
    async fn watch(&self, chain: &str, log: &EventLog) -> anyhow::Error {
        let mut entries =
            match tokio::time::timeout(ATTEMPT, self.kv.watch_with_history(chain)).await {
                Ok(Ok(entries)) => entries,
                Ok(Err(error)) => return anyhow::Error::new(error).context("watching"),
                Err(_) => return anyhow::anyhow!("watching: no answer"),
            };
        // Marks read before this log has reached their position.
        let mut waiting: Option<Marks> = None;
        let mut look = tokio::time::interval(CATCH_UP);
        loop {
            let entry = tokio::select! {
                entry = entries.next() => entry,
                _ = look.tick(), if waiting.is_some() => {
                    if let Some(marks) = waiting.filter(|m| log.head() >= m.at) {
                        raise(log, marks);
                        waiting = None;
                    }
                    continue;
                }
            };
            let entry = match entry {
                Some(Ok(entry)) => entry,
                Some(Err(error)) => return anyhow::Error::new(error).context("reading the watch"),
                None => return anyhow::anyhow!("the watch ended"),
            };
            if entry.operation != kv::Operation::Put {
                continue;
            }
            match serde_json::from_slice::<Marks>(&entry.value) {
                Ok(marks) if log.head() >= marks.at => raise(log, marks),
                Ok(marks) => waiting = Some(marks),
                Err(error) => {
                    tracing::warn!(%chain, %error, "unreadable finality marks on the bus; passed over");
                }
            }
        }
    }
}

/// Raises `log`'s grades to `marks`.
fn raise(log: &EventLog, marks: Marks) {
    if let Some(number) = marks.finalized {
        log.raise_finality(Grade::Finalized, number);
    }
    if let Some(number) = marks.safe {
        log.raise_finality(Grade::Safe, number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chainsieve_config::LogConfig;
    use chainsieve_eventlog::Finality;

    #[test]
    fn marks_read_back_and_only_raise_a_log() {
        let marks = Marks {
            safe: Some(12),
            finalized: Some(8),
            at: 3,
        };
        let text = serde_json::to_vec(&marks).expect("encodes");
        assert_eq!(
            serde_json::from_slice::<Marks>(&text).expect("decodes"),
            marks
        );
        let log = EventLog::new("eth", 16, LogConfig::default().memory_mib);
        raise(&log, marks);
        raise(
            &log,
            Marks {
                safe: Some(10),
                finalized: None,
                at: 0,
            },
        );
        assert_eq!(
            log.finality(),
            Finality {
                safe: Some(12),
                finalized: Some(8)
            }
        );
    }
}
