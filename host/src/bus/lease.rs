//! Which ingest writes a chain's log: the holder of the chain's lease, a
//! key in the KV bucket `<prefix>-leases` whose entries expire
//! `[bus] lease_ms` after their last write (docs/src/architecture.md, The bus).
//!
//! A standby tries to create the key every quarter of the lease and gets
//! it once the holder's entry has expired. The holder renews it every
//! quarter, each renewal expecting the revision of the last one, and gives
//! up at the first renewal that fails or takes longer than a quarter: it
//! stops writing before any standby can hold the key. The stream's
//! expected-sequence fencing guards the log even so ([`super::publish`]).

use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::kv;
use tokio_util::sync::CancellationToken;

use super::Bus;

/// The leases of every chain on one bus, taken in this process's name.
#[derive(Clone, Debug)]
pub struct Leases {
    kv: kv::Store,
    ttl: Duration,
    /// Names this process in the key's value, for people reading the
    /// bucket.
    holder: String,
}

/// This process's hold on one chain's log.
#[derive(Debug)]
pub struct Lease {
    leases: Leases,
    chain: String,
    /// The revision of the last write: a renewal expects it, so one that
    /// finds another holder's write fails.
    revision: u64,
}

impl Bus {
    /// The lease bucket (created with `[bus] lease_ms` as its entries' age
    /// if it does not exist), for a process named `holder`.
    pub async fn leases(&self, holder: &str) -> anyhow::Result<Leases> {
        let bucket = format!("{}-leases", self.config.prefix);
        let kv = self
            .jetstream
            .create_or_update_key_value(kv::Config {
                bucket: bucket.clone(),
                history: 1,
                max_age: self.config.lease(),
                storage: async_nats::jetstream::stream::StorageType::File,
                num_replicas: self.config.replicas,
                ..Default::default()
            })
            .await
            .with_context(|| format!("creating the lease bucket {bucket}"))?;
        Ok(Leases {
            kv,
            ttl: self.config.lease(),
            holder: holder.to_string(),
        })
    }
}

impl Leases {
    fn quarter(&self) -> Duration {
        self.ttl / 4
    }

    /// Waits until this process holds `chain`'s lease; `None` at
    /// `shutdown`.
    pub async fn acquire(&self, chain: &str, shutdown: &CancellationToken) -> Option<Lease> {
        loop {
            match self.kv.create(chain, self.holder.clone().into()).await {
                Ok(revision) => {
                    return Some(Lease {
                        leases: self.clone(),
                        chain: chain.to_string(),
                        revision,
                    });
                }
                Err(error) if error.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(error) => {
                    tracing::warn!(chain, %error, "cannot take the lease; trying again");
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(self.quarter()) => {}
            }
        }
    }
}

impl Lease {
    /// Renews the lease until a renewal fails, then cancels `lost`; or
    /// until `lost` is cancelled by someone else, then gives the lease
    /// back so a standby need not wait for it to expire.
    pub async fn keep(mut self, lost: CancellationToken) {
        let quarter = self.leases.quarter();
        loop {
            tokio::select! {
                () = lost.cancelled() => {
                    self.release().await;
                    return;
                }
                () = tokio::time::sleep(quarter) => {}
            }
            let renewal = self.leases.kv.update(
                &self.chain,
                self.leases.holder.clone().into(),
                self.revision,
            );
            match tokio::time::timeout(quarter, renewal).await {
                Ok(Ok(revision)) => self.revision = revision,
                Ok(Err(error)) => {
                    tracing::error!(chain = %self.chain, %error, "lost the lease");
                    lost.cancel();
                    return;
                }
                Err(_) => {
                    tracing::error!(chain = %self.chain, "lost the lease: the bus did not renew it in time");
                    lost.cancel();
                    return;
                }
            }
        }
    }

    /// Deletes the key if this holder's write is still the last one.
    async fn release(self) {
        let released = self
            .leases
            .kv
            .delete_expect_revision(&self.chain, Some(self.revision));
        if let Ok(Err(error)) = tokio::time::timeout(self.leases.quarter(), released).await {
            tracing::debug!(chain = %self.chain, %error, "the lease was not given back; it expires");
        }
    }
}
