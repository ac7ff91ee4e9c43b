//! The component harness: one filter component on the server's engine (same
//! limits, same batch encoding), fed events from JSON in the wire shapes, and
//! asked which match. Behind `chainsieve filter test`, and a library API for
//! tests of filters (the project's own guest tests use it).
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use chainsieve::filters::harness::Harness;
//! let mut harness = Harness::open("target/filters/chainsieve_logs_filter_0_2.wasm".as_ref())?;
//! let (subscription, _payload) = harness
//!     .subscribe(r#"[{"address": "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48"}]"#)?
//!     .map_err(anyhow::Error::msg)?;
//! let events = std::fs::read_to_string("tests/fixtures/events/logs.jsonl")?;
//! for m in harness.run_jsonl(&events)? {
//!     assert_eq!(m.subscription, subscription);
//! }
//! # Ok(()) }
//! ```

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use super::contract::{Delivery, FilterManifest};
use super::engine::{FilterEngine, FilterInstance};
use crate::config::FiltersConfig;
use crate::ingest::StreamEvent;
use crate::ingest::upstream::stream_event;
use crate::log::batch::EventBatch;

/// Events per `match-batch` call unless set otherwise: the size of a busy
/// block's transactions.
pub const DEFAULT_BATCH: usize = 1_024;

/// One event going to one subscription: `event` is the event's position in
/// the input (0-based), `subscription` the number [`Harness::subscribe`]
/// returned.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Match {
    pub event: usize,
    pub subscription: u64,
    /// The payload a 0.2 component wrote for this match, as it wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
}

/// A component instance and its subscriptions.
pub struct Harness {
    /// Kept for the instance's lifetime: the engine owns its limits.
    _engine: Arc<FilterEngine>,
    instance: FilterInstance,
    manifest: FilterManifest,
    next_subscription: u64,
    batch: usize,
}

impl Harness {
    /// Loads the component at `path` with the server's default limits.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Self::load(
            &path.display().to_string(),
            &bytes,
            &FiltersConfig::default(),
        )
    }

    /// Loads `bytes` (named `origin` in messages) with `limits`' deadline
    /// and memory cap.
    pub fn load(origin: &str, bytes: &[u8], limits: &FiltersConfig) -> anyhow::Result<Self> {
        let engine = FilterEngine::new(limits)?;
        let component = engine.load(origin, bytes)?;
        let instance = engine.instantiate(&component)?;
        Ok(Self {
            _engine: engine,
            instance,
            manifest: component.manifest,
            next_subscription: 0,
            batch: DEFAULT_BATCH,
        })
    }

    /// Events per `match-batch` call (at least 1).
    pub fn with_batch_size(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }

    pub fn manifest(&self) -> &FilterManifest {
        &self.manifest
    }

    /// Subscribes with `params` (the JSON array after the topic, as a
    /// client sends it): the subscription's number (0, 1, … in order) and
    /// the payload it would receive. `Ok(Err(message))` is the component
    /// refusing them with the message a client would get; `Err` is the
    /// component failing.
    pub fn subscribe(&mut self, params: &str) -> anyhow::Result<Result<(u64, Delivery), String>> {
        let id = self.next_subscription;
        let outcome = self
            .instance
            .subscribe(id, params)
            .context("calling subscribe")?;
        Ok(outcome.map(|delivery| {
            self.next_subscription += 1;
            (id, delivery)
        }))
    }

    pub fn unsubscribe(&mut self, subscription: u64) -> anyhow::Result<()> {
        self.instance
            .unsubscribe(subscription)
            .context("calling unsubscribe")
    }

    /// Matches `events` (of the component's source) in batches; the
    /// matches sorted by event, then subscription.
    pub fn run(&mut self, events: Vec<StreamEvent>) -> anyhow::Result<Vec<Match>> {
        let mut matches = Vec::new();
        let mut events = events.into_iter().peekable();
        let mut offset = 0;
        while events.peek().is_some() {
            let chunk: Vec<StreamEvent> = events.by_ref().take(self.batch).collect();
            let len = chunk.len();
            let batch = EventBatch::new(self.manifest.source, chunk);
            let found = self
                .run_encoded(&self.manifest.layout.of(&batch), len)
                .with_context(|| format!("matching events {offset}..{}", offset + len))?;
            matches.extend(found.into_iter().map(|m| Match {
                event: offset + m.event,
                ..m
            }));
            offset += len;
        }
        matches.sort_unstable();
        Ok(matches)
    }

    /// Matches one batch already in the layout the component reads, of
    /// `len` events; the matches in the component's order, with the
    /// payloads it wrote (checked as the server checks them).
    pub fn run_encoded(&mut self, batch: &[u8], len: usize) -> anyhow::Result<Vec<Match>> {
        let found = self.instance.match_batch(batch)?;
        found
            .pairs()
            .enumerate()
            .map(|(pair, (event, subscription))| {
                let event = event as usize;
                if event >= len {
                    bail!("the component matched event {event} of a batch of {len}");
                }
                let payload = found
                    .payload_of(pair)
                    .and_then(|index| found.written(index))
                    .map(|bytes| String::from_utf8_lossy(bytes).into_owned());
                Ok(Match {
                    event,
                    subscription,
                    payload,
                })
            })
            .collect()
    }

    /// Reads events of the component's source, one JSON object per line
    /// (blank lines skipped), and matches them.
    pub fn run_jsonl(&mut self, text: &str) -> anyhow::Result<Vec<Match>> {
        let events = read_events(self.manifest.source, text)?;
        self.run(events)
    }
}

/// Parses JSON lines in the wire shapes into events of `source`; an error
/// names the line.
pub fn read_events(
    source: chainsieve_filter_core::Source,
    text: &str,
) -> anyhow::Result<Vec<StreamEvent>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            stream_event(source, line).with_context(|| {
                format!(
                    "line {} is not a {} event in the wire shape",
                    number + 1,
                    source.name()
                )
            })
        })
        .collect()
}
