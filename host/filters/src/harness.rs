//! The component harness: one filter component on the server's engine (same
//! limits, same batch encoding), fed events from JSON in the wire shapes, and
//! asked which match. Behind `chainsieve filter test`, and a library API for
//! tests of filters (the project's own guest tests use it).
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use chainsieve_filters::harness::Harness;
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

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use super::contract::{Delivery, FilterManifest};
use super::engine::{FilterEngine, FilterInstance};
use crate::batch::EventBatch;
use chainsieve_config::FiltersConfig;
use chainsieve_model::StreamEvent;
use chainsieve_model::wire::stream_event;

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
    /// `len` events; the matches in the order the instance answers (the
    /// component's, then those of the subscriptions the host serves itself,
    /// subscriber by subscriber), with the payloads the component wrote
    /// (checked as the server checks them).
    pub fn run_encoded(&mut self, batch: &[u8], len: usize) -> anyhow::Result<Vec<Match>> {
        let found = self.instance.match_batch(batch, None)?;
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

/// How a run's matches differ from the expected ones (`chainsieve filter
/// test --expect`). Matches are compared as a multiset: `event` and
/// `subscription` equal, and `payload` equal as a JSON value (key order and
/// whitespace do not matter; a payload that is not JSON compares as text).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Expected and produced for the same event and subscription, with
    /// payloads that differ: (expected, got).
    pub differing: Vec<(Match, Match)>,
    /// Expected, not produced.
    pub missing: Vec<Match>,
    /// Produced, not expected.
    pub unexpected: Vec<Match>,
}

impl Comparison {
    /// Compares `got` against `expected`.
    pub fn of(expected: &[Match], got: &[Match]) -> Self {
        let mut expected = by_pair(expected);
        let mut got = by_pair(got);
        let pairs: std::collections::BTreeSet<(usize, u64)> =
            expected.keys().chain(got.keys()).copied().collect();
        let mut comparison = Self::default();
        for pair in pairs {
            let mut wanted = expected.remove(&pair).unwrap_or_default();
            let mut made = got.remove(&pair).unwrap_or_default();
            // Equal payloads cancel out, whatever their order.
            wanted.retain(
                |(_, payload)| match made.iter().position(|(_, p)| p == payload) {
                    Some(at) => {
                        made.remove(at);
                        false
                    }
                    None => true,
                },
            );
            let mut wanted = wanted.into_iter().map(|(m, _)| m.clone());
            let mut made = made.into_iter().map(|(m, _)| m.clone());
            loop {
                match (wanted.next(), made.next()) {
                    (Some(want), Some(have)) => comparison.differing.push((want, have)),
                    (Some(want), None) => comparison.missing.push(want),
                    (None, Some(have)) => comparison.unexpected.push(have),
                    (None, None) => break,
                }
            }
        }
        comparison
    }

    /// Whether the run gave exactly what was expected.
    pub fn is_equal(&self) -> bool {
        self.differing.is_empty() && self.missing.is_empty() && self.unexpected.is_empty()
    }
}

/// A payload as compared: its JSON value, or its text when it is not JSON.
type Compared<'a> = Option<Result<serde_json::Value, &'a str>>;

/// `matches` by (event, subscription), each with its payload as compared.
fn by_pair(matches: &[Match]) -> BTreeMap<(usize, u64), Vec<(&Match, Compared<'_>)>> {
    let mut pairs: BTreeMap<_, Vec<_>> = BTreeMap::new();
    for m in matches {
        let payload = m
            .payload
            .as_deref()
            .map(|text| serde_json::from_str(text).map_err(|_| text));
        pairs
            .entry((m.event, m.subscription))
            .or_default()
            .push((m, payload));
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(event: usize, subscription: u64, payload: Option<&str>) -> Match {
        Match {
            event,
            subscription,
            payload: payload.map(str::to_owned),
        }
    }

    #[test]
    fn payloads_compare_as_json_values_in_any_order() {
        let expected = [
            at(1, 0, Some(r#"{"token":"0xa0","amount":"5"}"#)),
            at(0, 0, None),
        ];
        let got = [
            at(0, 0, None),
            at(1, 0, Some(r#"{ "amount": "5", "token": "0xa0" }"#)),
        ];
        let comparison = Comparison::of(&expected, &got);
        assert!(comparison.is_equal(), "{comparison:?}");
    }

    /// A payload that differs is one difference naming both sides, not a
    /// match missing and another unexpected.
    #[test]
    fn a_different_payload_is_reported_once_with_both_sides() {
        let expected = [at(3, 1, Some(r#"{"amount":"5"}"#)), at(4, 1, None)];
        let got = [at(3, 1, Some(r#"{"amount":"6"}"#)), at(5, 0, None)];
        assert_eq!(
            Comparison::of(&expected, &got),
            Comparison {
                differing: vec![(expected[0].clone(), got[0].clone())],
                missing: vec![expected[1].clone()],
                unexpected: vec![got[1].clone()],
            }
        );
    }

    /// The same match twice is two matches: one of them missing is a
    /// difference. Text that is not JSON compares as text.
    #[test]
    fn repeats_count_and_text_compares_as_text() {
        let twice = [at(0, 0, Some("not json")), at(0, 0, Some("not json"))];
        let comparison = Comparison::of(&twice, &twice[..1]);
        assert_eq!(comparison.missing, vec![twice[0].clone()]);
        assert!(comparison.differing.is_empty() && comparison.unexpected.is_empty());
        let comparison = Comparison::of(&twice[..1], &[at(0, 0, Some("not  json"))]);
        assert_eq!(comparison.differing.len(), 1);
    }
}
