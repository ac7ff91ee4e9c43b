//! Creating the bus's streams and buckets as a server starts: a request
//! the bus does not answer in time (a cluster electing a leader, or too
//! busy to answer within the client's timeout) is sent again, for
//! [`PATIENCE`] at most, so a server started beside a struggling cluster
//! waits for it rather than exits. Any other error is final.

use std::future::Future;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::context::{
    CreateKeyValueError, CreateKeyValueErrorKind, CreateObjectStoreError, CreateStreamError,
    CreateStreamErrorKind,
};
use async_nats::jetstream::{kv, object_store, stream};
use tokio::time::Instant;

use super::Bus;

/// How long a starting server asks again.
const PATIENCE: Duration = Duration::from_secs(60);

/// The pause between two asks (each has already waited the client's
/// timeout).
const PAUSE: Duration = Duration::from_millis(250);

impl Bus {
    /// Creates the stream `config` names, or updates it to `config`.
    pub(super) async fn create_stream(
        &self,
        config: stream::Config,
    ) -> Result<stream::Info, CreateStreamError> {
        patiently(
            &config.name,
            |error: &CreateStreamError| {
                matches!(
                    error.kind(),
                    CreateStreamErrorKind::TimedOut | CreateStreamErrorKind::JetStreamUnavailable
                )
            },
            || self.jetstream.create_or_update_stream(config.clone()),
        )
        .await
    }

    /// Creates the bucket `config` names, or updates it to `config`.
    pub(super) async fn create_bucket(
        &self,
        config: kv::Config,
    ) -> Result<kv::Store, CreateKeyValueError> {
        patiently(
            &config.bucket,
            |error: &CreateKeyValueError| error.kind() == CreateKeyValueErrorKind::TimedOut,
            || self.jetstream.create_or_update_key_value(config.clone()),
        )
        .await
    }
}

impl Bus {
    /// The KV bucket `<prefix>-<name>`, created if it does not exist: each
    /// key's latest value, on file, with the streams' replicas; an entry
    /// unwritten for `max_age` goes (zero: never).
    pub(super) async fn latest_bucket(
        &self,
        name: &str,
        max_age: Duration,
    ) -> anyhow::Result<kv::Store> {
        let config = kv::Config {
            bucket: format!("{}-{name}", self.config.prefix),
            history: 1,
            max_age,
            storage: async_nats::jetstream::stream::StorageType::File,
            num_replicas: self.config.replicas,
            ..Default::default()
        };
        let bucket = config.bucket.clone();
        self.create_bucket(config)
            .await
            .with_context(|| format!("creating the bucket {bucket}"))
    }

    /// Creates the object store `config` names (or finds it as it is).
    pub(super) async fn create_object_store(
        &self,
        config: object_store::Config,
    ) -> Result<object_store::ObjectStore, CreateObjectStoreError> {
        patiently(
            &config.bucket,
            |error: &CreateObjectStoreError| {
                // Its stream's creation timed out, behind the store's error.
                std::error::Error::source(error)
                    .and_then(|source| source.downcast_ref::<CreateStreamError>())
                    .is_some_and(|error| {
                        matches!(
                            error.kind(),
                            CreateStreamErrorKind::TimedOut
                                | CreateStreamErrorKind::JetStreamUnavailable
                        )
                    })
            },
            || self.jetstream.create_object_store(config.clone()),
        )
        .await
    }
}

/// `ask()` until it answers or fails otherwise than `timed_out` says, or
/// [`PATIENCE`] has passed.
async fn patiently<T, E: std::fmt::Display, F: Future<Output = Result<T, E>>>(
    what: &str,
    timed_out: impl Fn(&E) -> bool,
    mut ask: impl FnMut() -> F,
) -> Result<T, E> {
    let deadline = Instant::now() + PATIENCE;
    let mut tries: u32 = 0;
    loop {
        match ask().await {
            Err(error) if timed_out(&error) && Instant::now() < deadline => {
                tries += 1;
                // Tries 1, 2, 4, 8…: said a few times, not at every try.
                if tries.is_power_of_two() {
                    tracing::warn!(what, %error, tries, "the bus did not answer in time; asking again");
                }
                tokio::time::sleep(PAUSE).await;
            }
            answered => return answered,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// Timeouts are asked again until an answer; another error ends it
    /// at once; past the patience the timeout is the answer.
    #[tokio::test(start_paused = true)]
    async fn timeouts_are_asked_again_and_other_errors_are_final() {
        let asked = AtomicU32::new(0);
        let answer = patiently(
            "a stream",
            |error: &&str| *error == "timed out",
            || {
                let n = asked.fetch_add(1, Ordering::Relaxed);
                async move { if n < 3 { Err("timed out") } else { Ok(n) } }
            },
        )
        .await;
        assert_eq!(answer, Ok(3));
        asked.store(0, Ordering::Relaxed);
        let refused = patiently(
            "a stream",
            |error: &&str| *error == "timed out",
            || {
                asked.fetch_add(1, Ordering::Relaxed);
                async { Err::<u32, _>("refused") }
            },
        )
        .await;
        assert_eq!(
            (refused, asked.load(Ordering::Relaxed)),
            (Err("refused"), 1)
        );
        let started = Instant::now();
        let never = patiently(
            "a stream",
            |error: &&str| *error == "timed out",
            || async { Err::<u32, _>("timed out") },
        )
        .await;
        assert_eq!(never, Err("timed out"));
        assert!(started.elapsed() >= PATIENCE);
    }
}
