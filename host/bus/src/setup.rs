//! Creating the bus's streams, buckets and object store as a server
//! starts, safe when other servers create the same objects at the same
//! moment (docs/src/bus.md, Running it). A request the bus does not
//! answer in time, or answers that it is not ready (a cluster electing a
//! leader, peers not yet known), is sent again for [`PATIENCE`] at most,
//! so a server started beside a struggling cluster waits for it rather
//! than exits. A creation that lost a race (the object came into being
//! meanwhile, from another server) is asked again, and then finds the
//! object: "it exists with this configuration" is success. An object that
//! exists with a configuration this server cannot take is a clear error
//! naming both. Every error says the bus's own words, once.

use std::error::Error as StdError;
use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{CreateStreamError, CreateStreamErrorKind};
use async_nats::jetstream::{kv, object_store, stream};
use tokio::time::Instant;

use super::Bus;

/// How long a starting server asks again.
const PATIENCE: Duration = Duration::from_secs(60);

/// The pause between two asks (each has already waited the client's
/// timeout).
const PAUSE: Duration = Duration::from_millis(250);

/// How often a creation that found the object being made by another
/// server is asked again before the difference is taken as real.
const RACES: u32 = 8;

/// What a failed creation calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retry {
    /// The bus is not ready or did not answer in time: ask again, for
    /// [`PATIENCE`].
    Wait,
    /// The object was being made by another server meanwhile: ask again,
    /// [`RACES`] times.
    Race,
    /// Nothing asking again would change.
    Final,
}

/// What the bus answered with, wherever in `error`'s chain it is.
fn classify(error: &(dyn StdError + 'static)) -> Retry {
    let mut at = Some(error);
    while let Some(error) = at {
        if let Some(error) = error.downcast_ref::<CreateStreamError>() {
            return match error.kind() {
                CreateStreamErrorKind::TimedOut | CreateStreamErrorKind::JetStreamUnavailable => {
                    Retry::Wait
                }
                CreateStreamErrorKind::JetStream(answer) => match answer.error_code() {
                    ErrorCode::STREAM_NAME_EXIST => Retry::Race,
                    ErrorCode::CLUSTER_NOT_AVAILABLE
                    | ErrorCode::CLUSTER_NOT_ACTIVE
                    | ErrorCode::CLUSTER_INCOMPLETE
                    | ErrorCode::CLUSTER_NO_PEERS
                    | ErrorCode::CLUSTER_NOT_LEADER
                    | ErrorCode::INSUFFICIENT_RESOURCES
                    | ErrorCode::RAFT_GENERAL => Retry::Wait,
                    _ => Retry::Final,
                },
                _ => Retry::Final,
            };
        }
        if error.downcast_ref::<async_nats::RequestError>().is_some() {
            return Retry::Wait;
        }
        at = error.source();
    }
    Retry::Final
}

/// `error`'s words, each level's once: the client's errors repeat their
/// source's words in their own, and some levels say nothing of their own.
fn words(error: &(dyn StdError + 'static)) -> String {
    let mut said: Vec<String> = Vec::new();
    let mut at = Some(error);
    while let Some(error) = at {
        let whole = error.to_string();
        let own = match error.source() {
            Some(source) => whole
                .strip_suffix(&source.to_string())
                .map_or(whole.as_str(), |own| own.trim_end_matches([':', ' ']))
                .to_string(),
            None => whole,
        };
        let own = own.trim().to_string();
        if !own.is_empty() && said.last() != Some(&own) {
            said.push(own);
        }
        at = error.source();
    }
    said.join(": ")
}

/// The parts of an object's configuration a server sets, to say how two
/// differ.
#[derive(Debug, PartialEq)]
struct Shape {
    replicas: usize,
    storage: stream::StorageType,
    max_age: Duration,
    max_bytes: i64,
    history: i64,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "replicas {}, {:?} storage, max age {} s, max bytes {}, history {}",
            self.replicas,
            self.storage,
            self.max_age.as_secs(),
            self.max_bytes,
            self.history
        )
    }
}

impl From<&stream::Config> for Shape {
    fn from(config: &stream::Config) -> Self {
        Self {
            replicas: config.num_replicas.max(1),
            storage: config.storage,
            max_age: config.max_age,
            max_bytes: config.max_bytes,
            history: config.max_messages_per_subject,
        }
    }
}

impl Bus {
    /// Creates the stream `config` names, or updates it to `config`.
    pub(crate) async fn create_stream(
        &self,
        config: stream::Config,
    ) -> anyhow::Result<stream::Info> {
        let name = config.name.clone();
        let wanted = Shape::from(&config);
        let asking = self.asking();
        let what = format!("the stream {name}");
        self.made(&name, &what, wanted, || {
            asking.create_or_update_stream(config.clone())
        })
        .await
    }

    /// Creates the bucket `config` names, or updates it to `config`.
    async fn create_bucket(&self, config: kv::Config) -> anyhow::Result<kv::Store> {
        let wanted = Shape {
            replicas: config.num_replicas.max(1),
            storage: config.storage,
            max_age: config.max_age,
            max_bytes: config.max_bytes,
            history: config.history.max(1),
        };
        let stream = format!("KV_{}", config.bucket);
        let what = format!("the bucket {}", config.bucket);
        let asking = self.asking();
        self.made(&stream, &what, wanted, || {
            asking.create_or_update_key_value(config.clone())
        })
        .await
    }

    /// The KV bucket `<prefix>-<name>`, created if it does not exist: each
    /// key's latest value, on file, with the streams' replicas; an entry
    /// unwritten for `max_age` goes (zero: never).
    pub async fn latest_bucket(&self, name: &str, max_age: Duration) -> anyhow::Result<kv::Store> {
        self.create_bucket(kv::Config {
            bucket: format!("{}-{name}", self.config.prefix),
            history: 1,
            max_age,
            storage: async_nats::jetstream::stream::StorageType::File,
            num_replicas: self.config.replicas,
            ..Default::default()
        })
        .await
    }

    /// Creates the object store `config` names (or finds it as it is).
    pub async fn create_object_store(
        &self,
        config: object_store::Config,
    ) -> anyhow::Result<object_store::ObjectStore> {
        let wanted = Shape {
            replicas: config.num_replicas.max(1),
            storage: config.storage,
            max_age: config.max_age,
            max_bytes: config.max_bytes,
            history: -1,
        };
        let stream = format!("OBJ_{}", config.bucket);
        let what = format!("the object store {}", config.bucket);
        let asking = self.asking();
        self.made(&stream, &what, wanted, || {
            asking.create_object_store(config.clone())
        })
        .await
    }

    /// The bus, each request waiting [`super::REQUEST_TIMEOUT`] at most: a
    /// cluster does not answer a creation made while the same object's
    /// creation by another server is under way (seen with nats-server
    /// 2.15: the client's default 10 s went by for each object a server
    /// lost the race for), so the creation is asked again soon, and then
    /// finds the object.
    pub fn asking(&self) -> async_nats::jetstream::Context {
        let mut asking = self.jetstream.clone();
        asking.set_timeout(super::REQUEST_TIMEOUT);
        asking
    }

    /// `ask()` as the module's doc says, for `what` (whose stream is
    /// `stream`), made as `wanted`.
    async fn made<T, E, F>(
        &self,
        stream: &str,
        what: &str,
        wanted: Shape,
        ask: impl FnMut() -> F,
    ) -> anyhow::Result<T>
    where
        E: StdError + Send + Sync + 'static,
        F: Future<Output = Result<T, E>>,
    {
        match patiently(what, |error: &E| classify(error), ask).await {
            Ok(made) => Ok(made),
            Err(error) => {
                let said = words(&error);
                let held = match self.asking().get_stream(stream).await {
                    Ok(found) => Some(Shape::from(&found.cached_info().config)),
                    Err(_) => None,
                };
                match held {
                    Some(held) if held != wanted => Err(anyhow::anyhow!(
                        "creating {what}: the bus holds it as ({held}), this server asks for ({wanted}): {said}"
                    )),
                    _ => Err(anyhow::anyhow!("creating {what}: {said}")),
                }
            }
        }
    }
}

/// `ask()` until it answers, or fails otherwise than `retry` says asking
/// again would mend, or [`PATIENCE`] has passed (or [`RACES`] races).
async fn patiently<T, E: StdError + 'static, F: Future<Output = Result<T, E>>>(
    what: &str,
    retry: impl Fn(&E) -> Retry,
    mut ask: impl FnMut() -> F,
) -> Result<T, E> {
    let deadline = Instant::now() + PATIENCE;
    let (mut waits, mut races): (u32, u32) = (0, 0);
    loop {
        let answer = ask().await;
        let again = match &answer {
            Err(error) if Instant::now() < deadline => retry(error),
            _ => Retry::Final,
        };
        match again {
            Retry::Wait => {
                waits += 1;
                // Tries 1, 2, 4, 8…: said a few times, not at every try.
                if waits.is_power_of_two()
                    && let Err(error) = &answer
                {
                    let error = words(error);
                    tracing::warn!(what, %error, tries = waits, "the bus is not ready; asking again");
                }
            }
            Retry::Race if races < RACES => {
                races += 1;
                tracing::debug!(what, "made by another server meanwhile; asking again");
            }
            Retry::Race | Retry::Final => return answer,
        }
        tokio::time::sleep(PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use async_nats::jetstream::context::{
        CreateKeyValueError, CreateKeyValueErrorKind, CreateObjectStoreError,
    };

    use super::*;

    /// An error that says only `.0`.
    #[derive(Debug, PartialEq, Eq)]
    struct Said(&'static str);

    impl std::fmt::Display for Said {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl StdError for Said {}

    fn retry_of(error: &Said) -> Retry {
        match error.0 {
            "timed out" => Retry::Wait,
            "raced" => Retry::Race,
            _ => Retry::Final,
        }
    }

    /// Asks `patiently` with answers `answer(n)` for the n-th ask; what it
    /// ended with and how often it asked.
    async fn asking(answer: impl Fn(u32) -> Result<u32, Said>) -> (Result<u32, Said>, u32) {
        let asked = AtomicU32::new(0);
        let answer = patiently("a stream", retry_of, || {
            let n = asked.fetch_add(1, Ordering::Relaxed);
            std::future::ready(answer(n))
        })
        .await;
        (answer, asked.load(Ordering::Relaxed))
    }

    /// Timeouts are asked again until an answer; a lost race a few times;
    /// another error ends it at once; past the patience the timeout is the
    /// answer, and a race that keeps being lost is a difference.
    #[tokio::test(start_paused = true)]
    async fn timeouts_and_races_are_asked_again_and_other_errors_are_final() {
        let waited = |n| if n < 3 { Err(Said("timed out")) } else { Ok(n) };
        assert_eq!(asking(waited).await, (Ok(3), 4));
        let raced = |n| if n < 2 { Err(Said("raced")) } else { Ok(n) };
        assert_eq!(asking(raced).await, (Ok(2), 3));
        assert_eq!(
            asking(|_| Err(Said("refused"))).await,
            (Err(Said("refused")), 1)
        );
        assert_eq!(
            asking(|_| Err(Said("raced"))).await,
            (Err(Said("raced")), RACES + 1)
        );
        let started = Instant::now();
        assert_eq!(
            asking(|_| Err(Said("timed out"))).await.0,
            Err(Said("timed out"))
        );
        assert!(started.elapsed() >= PATIENCE);
    }

    /// What a bucket's creation fails with when its stream's request timed
    /// out (a cluster electing its leader as servers start together): the
    /// timeout behind the bucket's error is found and waited out, and said
    /// once; the bus's refusals are told apart by their code.
    #[test]
    fn the_bus_s_answer_is_found_behind_the_client_s_errors_and_said_once() {
        let timed_out = CreateKeyValueError::with_source(
            CreateKeyValueErrorKind::JetStream,
            CreateStreamError::with_source(
                CreateStreamErrorKind::TimedOut,
                CreateStreamError::new(CreateStreamErrorKind::TimedOut),
            ),
        );
        assert_eq!(classify(&timed_out), Retry::Wait);
        assert_eq!(
            words(&timed_out),
            "JetStream error: jetstream request timed out"
        );
        let answer = |code: u16, text: &str| -> CreateStreamError {
            let answer = serde_json::json!({"code": 400, "err_code": code, "description": text});
            let answer: async_nats::jetstream::Error =
                serde_json::from_value(answer).expect("a JetStream error");
            CreateStreamError::new(CreateStreamErrorKind::JetStream(answer))
        };
        let exists = CreateObjectStoreError::with_source(
            CreateKeyValueErrorKind::BucketCreate,
            answer(
                10058,
                "stream name already in use with a different configuration",
            ),
        );
        assert_eq!(classify(&exists), Retry::Race);
        assert_eq!(
            words(&exists),
            "bucket creation failed: jetstream error: stream name already in use with a different configuration (code 400, error code 10058)"
        );
        let forming = answer(10008, "JetStream system temporarily unavailable");
        assert_eq!(classify(&forming), Retry::Wait);
        let invalid = answer(10052, "replicas > 1 not supported in non-clustered mode");
        assert_eq!(classify(&invalid), Retry::Final);
        assert!(words(&invalid).contains("replicas > 1 not supported"));
    }
}
