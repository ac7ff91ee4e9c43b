//! The bus between roles (docs/src/architecture.md, The bus): an `ingest`
//! publishes each chain's log steps to a NATS JetStream stream
//! ([`publish`]), an `edge` follows them into its own log ([`follow`]). A
//! step's position is its message's stream sequence, so a cursor means the
//! same on every edge and a client may resume on any of them.
//!
//! The stream is the log's single copy between processes: an ingest that
//! starts (or takes over) continues it from its tail, and publishes with
//! the sequence it expects to be last, so two writers can never interleave
//! ([`linear`]). Beside it, the features keep their state on the bus
//! through what this crate opens: streams ([`Bus::stream`], each chain's
//! price journal), KV buckets ([`Bus::latest_bucket`]: keys, usage,
//! webhooks), the object store (uploaded filters) and leases ([`lease`]);
//! each feature's backend lives in its own crate, above this one.
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_config`],
//! [`chainsieve_eventlog`], [`chainsieve_model`].

pub mod bucket;
pub mod codec;
pub mod finality;
pub mod follow;
pub mod lease;
pub mod linear;
pub mod publish;
mod setup;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::{self, stream};
use linear::{LinearStream, RETRY};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use chainsieve_config::BusConfig;
use chainsieve_eventlog::Position;
use chainsieve_model::{ChainEvent, SourceEvent};

/// The longest a running reader or writer waits for one answer from the
/// bus: a stream's state or message, a new consumer, a publish's
/// acknowledgement. While a stream has no leader (seconds after the server
/// leading it died, docs/src/architecture.md, The bus) its requests go
/// unanswered, and the client's defaults (10 s a request, 5 s an
/// acknowledgement) kept an edge waiting that long after the stream had a
/// new leader; asking again each second reaches the new leader within a
/// second of its election. An answer that comes later is only a retry
/// more: reads are retried from where they stopped, and a publish finds
/// its own message ([`linear`]).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// A connection to the bus's NATS servers, shared by every chain.
#[derive(Clone, Debug)]
pub struct Bus {
    jetstream: jetstream::Context,
    config: BusConfig,
    /// Counts the connections made to the servers: a consumer made before
    /// the last one may be gone with a restarted server, and is made anew
    /// at once rather than after its heartbeats fail.
    connects: watch::Receiver<u64>,
}

impl Bus {
    /// Connects to `config.urls`; fails if no server answers. Once
    /// connected the client reconnects by itself, for as long as it takes.
    pub async fn connect(config: &BusConfig, name: &str) -> anyhow::Result<Self> {
        let (connected, connects) = watch::channel(0);
        let connected = Arc::new(connected);
        let client = async_nats::ConnectOptions::new()
            .name(name)
            .event_callback(move |event| {
                let connected = connected.clone();
                async move {
                    if matches!(event, async_nats::Event::Connected) {
                        connected.send_modify(|count| *count += 1);
                    }
                }
            })
            .connect(config.urls.as_slice())
            .await
            .with_context(|| format!("connecting to NATS at {}", config.urls.join(", ")))?;
        Ok(Self {
            jetstream: jetstream::new(client),
            config: config.clone(),
            connects,
        })
    }

    /// `chain`'s log on the bus: its stream, created with the configured
    /// limits if it does not exist yet (and updated to them if it does).
    pub async fn log(&self, chain: &str) -> anyhow::Result<ChainLog> {
        let limits = (
            self.config.max_age(),
            i64::try_from(self.config.max_mib << 20).unwrap_or(i64::MAX),
        );
        Ok(ChainLog {
            chain: chain.into(),
            linear: self.stream(chain, "log", "", limits).await?,
        })
    }

    /// The configuration it was connected with.
    pub fn config(&self) -> &BusConfig {
        &self.config
    }

    /// The NATS client under the bus, for a feature's own requests.
    pub fn client(&self) -> async_nats::Client {
        self.jetstream.client()
    }

    /// Opens (creating or updating) the stream `<prefix>-<chain><suffix>`
    /// of subject `<prefix>.<chain>.<kind>`, kept within `(max_age,
    /// max_bytes)` (zero and -1: no limit).
    pub async fn stream(
        &self,
        chain: &str,
        kind: &str,
        suffix: &str,
        (max_age, max_bytes): (Duration, i64),
    ) -> anyhow::Result<LinearStream> {
        let name = format!("{}-{chain}{suffix}", self.config.prefix);
        let subject = format!("{}.{chain}.{kind}", self.config.prefix);
        let config = stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            max_age,
            max_bytes,
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            discard: stream::DiscardPolicy::Old,
            num_replicas: self.config.replicas,
            ..Default::default()
        };
        self.create_stream(config).await?;
        // Once open, every request waits REQUEST_TIMEOUT at most.
        let running = self.asking();
        let stream = running
            .get_stream_no_info(&name)
            .await
            .with_context(|| format!("opening the stream {name}"))?;
        Ok(LinearStream::new(
            format!("{chain}'s {kind}"),
            subject,
            stream,
            running,
            self.connects.clone(),
        ))
    }
}

/// One chain's log on the bus.
#[derive(Clone, Debug)]
pub struct ChainLog {
    chain: Arc<str>,
    /// The stream: one message per step, its sequence the step's position.
    linear: LinearStream,
}

/// The newest steps of a chain's log on the bus.
#[derive(Debug)]
pub struct Tail {
    /// Oldest first.
    pub steps: Vec<(Position, ChainEvent)>,
    /// The stream's last position (0 for a stream never written), which
    /// the first step of `steps` may not reach when they are empty.
    pub head: Position,
}

impl Tail {
    /// Hands the steps to the pipeline behind `out`, each at its position;
    /// `None` if the pipeline stopped.
    pub async fn place(self, out: &mpsc::Sender<SourceEvent>) -> Option<()> {
        for (position, change) in self.steps {
            out.send(SourceEvent::Logged { position, change })
                .await
                .ok()?;
        }
        Some(())
    }
}

impl ChainLog {
    /// The chain's name.
    pub fn chain(&self) -> &str {
        &self.chain
    }

    /// The first and last positions the stream holds (0 for a stream never
    /// written).
    pub async fn bounds(&self) -> anyhow::Result<(Position, Position)> {
        self.linear.bounds().await
    }

    /// The step at `position`; `None` if the stream no longer (or never)
    /// held it.
    pub async fn step(&self, position: Position) -> anyhow::Result<Option<ChainEvent>> {
        let Some(payload) = self.linear.get(position).await? else {
            return Ok(None);
        };
        let change = codec::decode(&payload)
            .with_context(|| format!("decoding {}'s step {position}", self.chain))?;
        Ok(Some(change))
    }

    /// Hands `reader` every step's message from `next` on, in order (see
    /// [`LinearStream::read`]).
    pub async fn read(
        &self,
        next: Position,
        reader: &mut impl linear::Reader,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<()>> {
        self.linear.read(next, reader, shutdown).await
    }

    /// [`ChainLog::tail`], tried until the bus answers; `None` at
    /// `shutdown`.
    pub async fn tail_when_read(
        &self,
        blocks: usize,
        shutdown: &CancellationToken,
    ) -> Option<Tail> {
        loop {
            let tail = tokio::select! {
                () = shutdown.cancelled() => return None,
                tail = self.tail(blocks) => tail,
            };
            match tail {
                Ok(tail) => return Some(tail),
                Err(error) => {
                    tracing::warn!(chain = %self.chain, error = format!("{error:#}"), "cannot read the log's tail; trying again");
                    pause(shutdown).await?;
                }
            }
        }
    }

    /// The newest steps, back to the one that added the `blocks`-th newest
    /// block (or the oldest the stream keeps): what a window of `blocks`
    /// blocks holds.
    pub async fn tail(&self, blocks: usize) -> anyhow::Result<Tail> {
        let (first, head) = self.linear.bounds().await?;
        let mut steps = Vec::new();
        let mut added = 0;
        let mut position = head;
        while position >= first && added < blocks {
            // Aged out since the state was read: the tail ends here.
            let Some(change) = self.step(position).await? else {
                break;
            };
            added += usize::from(matches!(change, ChainEvent::Added(_)));
            steps.push((position, change));
            position -= 1;
        }
        steps.reverse();
        Ok(Tail { steps, head })
    }
}

/// Waits [`RETRY`]; `None` at `shutdown`.
pub async fn pause(shutdown: &CancellationToken) -> Option<()> {
    tokio::select! {
        () = shutdown.cancelled() => None,
        () = tokio::time::sleep(RETRY) => Some(()),
    }
}
