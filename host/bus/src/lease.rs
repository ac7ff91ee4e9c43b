//! Which ingest writes a chain's log: the holder of the chain's lease, a
//! key in the KV bucket `<prefix>-leases` whose entries expire
//! `[bus] lease_ms` after their last write (docs/src/architecture.md, The bus).
//!
//! A standby tries to create the key every quarter of the lease and gets
//! it once the holder's entry has expired. The holder renews it every
//! quarter, each renewal expecting the revision of the last one. A renewal
//! that fails or goes unanswered (a server killed under the client, the
//! bucket electing a leader) is tried again at once, for as long as the
//! lease allows: the holder gives up a quarter of the lease before its
//! entry could expire, counted from when it sent the last renewal the bus
//! took (the entry was written after that), so it stops writing before
//! any standby can hold the key. A renewal refused because another write
//! came since the last one gives up at once, unless that write is the
//! holder's own (a renewal that landed though its answer was lost). The
//! stream's expected-sequence fencing guards the log even so
//! ([`super::publish`]).
//!
//! The same leases, in a bucket of their own, say which edge delivers each
//! webhook ([`super::webhooks`]).

use std::time::Duration;

use async_nats::jetstream::kv;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Bus;

/// The leases of one bucket (every chain's, or every webhook's), taken in
/// this process's name.
#[derive(Clone, Debug)]
pub struct Leases {
    kv: kv::Store,
    ttl: Duration,
    /// Names this process in the key's value, for people reading the
    /// bucket, and tells its own writes from another holder's.
    holder: String,
}

/// This process's hold on one key: a chain's log, or a webhook.
#[derive(Debug)]
pub struct Lease {
    leases: Leases,
    key: String,
    /// The revision of the last write: a renewal expects it, so one that
    /// finds another holder's write fails.
    revision: u64,
    hold: Hold,
}

/// How long a hold on the key lasts, in the holder's own time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Hold {
    ttl: Duration,
    /// When the last write of the key that the bus took was sent: the
    /// entry was written after, so it expires no sooner than `sent + ttl`.
    sent: Instant,
}

impl Hold {
    /// When the next renewal is due: a quarter of the lease after the last.
    fn renewal(self) -> Instant {
        self.sent + self.ttl / 4
    }

    /// How long an attempt to renew, started at `now`, may wait for its
    /// answer: a quarter of the lease, and never past the moment the holder
    /// gives up, a quarter of the lease before its entry could expire (left
    /// for its term to stop writing). `None` once that moment has come: the
    /// lease is lost.
    fn attempt(self, now: Instant) -> Option<Duration> {
        let give_up = self.sent + (self.ttl - self.ttl / 4);
        let left = give_up.saturating_duration_since(now);
        (!left.is_zero()).then(|| left.min(self.ttl / 4))
    }

    /// The pause after an attempt that failed before trying again: short,
    /// so a client that reconnected renews at once, yet no busy loop
    /// against a bucket that refuses at once while it has no leader.
    fn retry(self) -> Duration {
        self.ttl / 32
    }
}

/// Whether the entry a refused renewal found (expecting `revision`) is
/// the holder's own later write: a renewal whose answer was lost after
/// the bus took it. Only this holder writes its name, and only a write
/// expecting `revision` could land after it, so such an entry is one of
/// this renewal's attempts, sent no sooner than the first.
fn own_write(
    (value, entry_revision, operation): (&[u8], u64, kv::Operation),
    holder: &str,
    revision: u64,
) -> bool {
    operation == kv::Operation::Put && entry_revision > revision && value == holder.as_bytes()
}

impl Bus {
    /// The chains' lease bucket (created with `[bus] lease_ms` as its
    /// entries' age if it does not exist), for a process named `holder`.
    pub async fn leases(&self, holder: &str) -> anyhow::Result<Leases> {
        self.lease_bucket("leases", self.config.lease(), holder)
            .await
    }

    /// The lease bucket `<prefix>-<name>`, whose entries last `ttl`, for a
    /// process named `holder` (unique among those sharing the bucket).
    pub async fn lease_bucket(
        &self,
        name: &str,
        ttl: Duration,
        holder: &str,
    ) -> anyhow::Result<Leases> {
        let kv = self.latest_bucket(name, ttl).await?;
        Ok(Leases {
            kv,
            ttl,
            holder: holder.to_string(),
        })
    }
}

impl Leases {
    fn quarter(&self) -> Duration {
        self.ttl / 4
    }

    /// Waits until this process holds `key`'s lease; `None` at
    /// `shutdown`. A try the bucket fails (it may have no leader) is made
    /// again sooner than one it refuses because another holds the key.
    pub async fn acquire(&self, key: &str, shutdown: &CancellationToken) -> Option<Lease> {
        let mut failures: u64 = 0;
        loop {
            let sent = Instant::now();
            let created = self.kv.create(key, self.holder.clone().into());
            let failed = match tokio::time::timeout(self.quarter(), created).await {
                Ok(Ok(revision)) => {
                    return Some(Lease {
                        leases: self.clone(),
                        key: key.to_string(),
                        revision,
                        hold: Hold {
                            ttl: self.ttl,
                            sent,
                        },
                    });
                }
                Ok(Err(error)) if error.kind() == kv::CreateErrorKind::AlreadyExists => None,
                Ok(Err(error)) => Some(error.to_string()),
                Err(_) => Some(format!("no answer in {:?}", self.quarter())),
            };
            let pause = match failed {
                None => self.quarter(),
                Some(error) => {
                    failures += 1;
                    // Failures 1, 2, 4, 8…: a bucket electing a leader
                    // for seconds says so a few times, not at every try.
                    if failures.is_power_of_two() {
                        tracing::warn!(lease = key, %error, failures, "cannot take the lease; trying again");
                    }
                    self.quarter() / 4
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}

impl Lease {
    /// Renews the lease until it is lost, then cancels `lost`; or until
    /// `lost` is cancelled by someone else, then gives the lease back so a
    /// standby need not wait for it to expire.
    pub async fn keep(mut self, lost: CancellationToken) {
        // However this ends (a panic too), the claim is told: a worker
        // must not deliver on a lease nobody renews.
        let _told = lost.clone().drop_guard();
        loop {
            tokio::select! {
                () = lost.cancelled() => {
                    self.release().await;
                    return;
                }
                () = tokio::time::sleep_until(self.hold.renewal()) => {}
            }
            let renewed = tokio::select! {
                () = lost.cancelled() => continue,
                renewed = self.renew() => renewed,
            };
            if let Err(why) = renewed {
                tracing::error!(lease = %self.key, %why, "lost the lease");
                lost.cancel();
                return;
            }
        }
    }

    /// One renewal, tried until the bus takes it or the lease is lost
    /// (the reason why).
    async fn renew(&mut self) -> Result<(), String> {
        let first = Instant::now();
        let mut failures: u64 = 0;
        loop {
            let now = Instant::now();
            let Some(wait) = self.hold.attempt(now) else {
                return Err("the bus did not renew it in time".into());
            };
            let renewal =
                self.leases
                    .kv
                    .update(&self.key, self.leases.holder.clone().into(), self.revision);
            let failed = match tokio::time::timeout(wait, renewal).await {
                Ok(Ok(revision)) => {
                    self.revision = revision;
                    self.hold.sent = now;
                    return Ok(());
                }
                Ok(Err(error)) if error.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    match tokio::time::timeout(wait, self.leases.kv.entry(&self.key)).await {
                        Ok(Ok(Some(entry))) => {
                            let found = (entry.value.as_ref(), entry.revision, entry.operation);
                            if !own_write(found, &self.leases.holder, self.revision) {
                                return Err(format!("{error}: another write came"));
                            }
                            self.revision = entry.revision;
                            self.hold.sent = first;
                            return Ok(());
                        }
                        Ok(Ok(None)) => return Err(format!("{error}: the key is gone")),
                        Ok(Err(read)) => format!("{error}, and reading the key failed: {read}"),
                        Err(_) => format!("{error}, and reading the key timed out"),
                    }
                }
                Ok(Err(error)) => error.to_string(),
                Err(_) => format!("no answer in {wait:?}"),
            };
            failures += 1;
            if failures.is_power_of_two() {
                tracing::warn!(lease = %self.key, error = %failed, failures, "the lease was not renewed; trying again");
            }
            tokio::time::sleep(self.hold.retry()).await;
        }
    }

    /// Deletes the key if this holder's write is still the last one.
    async fn release(self) {
        let released = self
            .leases
            .kv
            .delete_expect_revision(&self.key, Some(self.revision));
        if let Ok(Err(error)) = tokio::time::timeout(self.leases.quarter(), released).await {
            tracing::debug!(lease = %self.key, %error, "the lease was not given back; it expires");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_millis(3_000);

    fn hold() -> Hold {
        Hold {
            ttl: TTL,
            sent: Instant::now(),
        }
    }

    #[test]
    fn a_renewal_is_due_a_quarter_after_the_last() {
        let hold = hold();
        assert_eq!(hold.renewal(), hold.sent + Duration::from_millis(750));
    }

    /// A renewal that fails is tried again, each try waiting a quarter at
    /// most, until three quarters of the lease have passed since the last
    /// renewal taken was sent; from then on the lease is lost, a quarter
    /// before a standby could hold the key.
    #[test]
    fn a_failed_renewal_is_tried_again_while_the_lease_allows() {
        let hold = hold();
        let at = |ms| hold.sent + Duration::from_millis(ms);
        assert_eq!(hold.attempt(at(750)), Some(Duration::from_millis(750)));
        assert_eq!(hold.attempt(at(1_500)), Some(Duration::from_millis(750)));
        assert_eq!(hold.attempt(at(1_600)), Some(Duration::from_millis(650)));
        assert_eq!(hold.attempt(at(2_249)), Some(Duration::from_millis(1)));
        assert_eq!(hold.attempt(at(2_250)), None);
        assert_eq!(hold.attempt(at(9_000)), None);
        // Every try ends before the entry could expire, with a quarter to
        // spare.
        for ms in (750..2_250).step_by(10) {
            let wait = hold.attempt(at(ms)).expect("still held");
            assert!(at(ms) + wait <= hold.sent + TTL - TTL / 4);
        }
        // Several tries fit between the first due and the last.
        assert!(hold.retry() * 8 < TTL - TTL / 4 - TTL / 4);
    }

    #[test]
    fn only_the_holders_own_later_write_renews() {
        let me = "ingest pid 7 #0000002a";
        let put = kv::Operation::Put;
        assert!(own_write((me.as_bytes(), 12, put), me, 11));
        assert!(!own_write((b"ingest pid 8 #00000001", 12, put), me, 11));
        assert!(!own_write((me.as_bytes(), 11, put), me, 11));
        assert!(!own_write((me.as_bytes(), 10, put), me, 11));
        assert!(!own_write((b"", 12, kv::Operation::Delete), me, 11));
        assert!(!own_write((b"", 12, kv::Operation::Purge), me, 11));
    }
}
