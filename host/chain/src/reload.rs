//! Hot swap: watches the filters directory and the uploads (the admin
//! API's, and on the bus every edge's) and brings every chain's actors in
//! line with them, without a restart.
//!
//! - a changed component (or one replacing a built-in) is swapped into the
//!   topic's actor between two batches, every live subscription replayed
//!   ([`FilterHandle::swap`]); if the new one fails to load or refuses a
//!   live subscription, the old one keeps serving and the reason is logged
//!   and reported;
//! - a new topic gets an actor per chain;
//! - a removed override falls back to the built-in (a swap like any other);
//! - a removed custom topic ends its subscriptions with an error
//!   notification ([`FilterHandle::retire`]).
//!
//! Operators should place files atomically (write elsewhere, then rename):
//! a half-written file fails to load, is reported, and is retried on its
//! next change. An upload is compiled before it is kept
//! ([`super::uploads::Uploads`]), then applied here like a changed file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt as _;
use futures_util::stream::BoxStream;
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::Chain;
use super::pipeline::PipelineState;
use chainsieve_filters::registry::Rejected;
use chainsieve_filters::{FilterComponent, FilterEngine, FilterHandle, FilterRegistry};
use chainsieve_runtime::metrics::Metrics;
use chainsieve_runtime::tasks::{Part, Tasks};
use chainsieve_uploads::UploadChange;

/// Quiet time after a change before the directory is read: a copy arrives
/// as several events.
const SETTLE: Duration = Duration::from_millis(200);

/// What the last scan did; a new value after every scan.
#[derive(Clone, Debug, Default)]
pub struct ReloadReport {
    /// Scans since startup (0: the startup load only).
    pub scans: u64,
    /// Files not served, and why: failing to load, a duplicate topic, or a
    /// swap a chain refused.
    pub rejected: Vec<Rejected>,
}

/// What the admin API asks of the hot swap.
#[derive(Debug)]
pub enum Command {
    /// Serve this uploaded (and compiled) component for its topic;
    /// answered with what the chains refused of it.
    Upload(Box<FilterComponent>, oneshot::Sender<Vec<Rejected>>),
    /// Stop serving `topic`'s upload (if it still does); answered once
    /// done.
    Remove(String, oneshot::Sender<()>),
}

/// The origin an uploaded component of `topic` is known by.
pub fn upload_origin(topic: &str) -> String {
    format!("uploaded {topic}")
}

/// Starts watching `dir` (or, while it does not exist, its parent for its
/// creation), following `uploads` (the store's changes) and taking
/// [`Command`]s. Reports after each change; stops at `shutdown`.
pub fn spawn(
    registry: FilterRegistry,
    engine: Arc<FilterEngine>,
    dir: PathBuf,
    chains: Vec<Arc<Chain>>,
    uploads: BoxStream<'static, UploadChange>,
    shutdown: CancellationToken,
    tasks: &Tasks,
) -> anyhow::Result<(watch::Receiver<ReloadReport>, mpsc::Sender<Command>)> {
    // Events name absolute paths when the watch does; compare like with like.
    let dir = std::path::absolute(&dir)
        .with_context(|| format!("resolving the filters directory {}", dir.display()))?;
    let (changes, rx) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // The receiver is gone only after shutdown.
        let _ = changes.send(event);
    })
    .context("starting the filters directory watcher")?;
    let parent = watch_parent(&dir);
    if let Err(error) = watcher.watch(&parent, RecursiveMode::NonRecursive) {
        // Not fatal: the directory itself may still be watched below.
        tracing::warn!(dir = %parent.display(), %error, "cannot watch for the filters directory being created or removed");
    }
    let watching_dir = dir.is_dir()
        && watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .inspect_err(|error| tracing::error!(dir = %dir.display(), %error, "cannot watch the filters directory; changes need a restart"))
            .is_ok();
    let (report, reports) = watch::channel(ReloadReport {
        scans: 0,
        rejected: registry.rejected(),
    });
    let reloader = Reloader {
        registry,
        engine,
        dir,
        chains,
        watcher,
        watching_dir,
        report,
    };
    let (commands, asked) = mpsc::channel(16);
    tasks.part(
        "filters reloader",
        Part::Service("filters"),
        reloader.run(rx, asked, uploads, shutdown),
    );
    Ok((reports, commands))
}

/// The directory that holds `dir`: watched for `dir` being created or
/// removed.
fn watch_parent(dir: &Path) -> PathBuf {
    dir.parent().unwrap_or(dir).to_path_buf()
}

struct Reloader {
    /// Owned here alone; lent to a blocking task for each scan.
    registry: FilterRegistry,
    engine: Arc<FilterEngine>,
    dir: PathBuf,
    chains: Vec<Arc<Chain>>,
    /// Kept alive for as long as the watch should run.
    watcher: RecommendedWatcher,
    /// inotify watches a directory, not a path: a directory created (or
    /// re-created) after startup needs a watch of its own.
    watching_dir: bool,
    report: watch::Sender<ReloadReport>,
}

impl Reloader {
    async fn run(
        mut self,
        mut changes: mpsc::UnboundedReceiver<notify::Result<notify::Event>>,
        mut commands: mpsc::Receiver<Command>,
        mut uploads: BoxStream<'static, UploadChange>,
        shutdown: CancellationToken,
    ) {
        loop {
            let change = tokio::select! {
                () = shutdown.cancelled() => return,
                Some(command) = commands.recv() => {
                    self.command(command).await;
                    continue;
                }
                Some(upload) = uploads.next() => {
                    self.uploaded(upload).await;
                    continue;
                }
                change = changes.recv() => change,
            };
            let Some(change) = change else { return };
            if !self.concerns_dir(&change) {
                continue;
            }
            // Let a burst of events (a copy, several files) settle.
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(SETTLE) => break,
                    more = changes.recv() => if more.is_none() { return },
                }
            }
            self.rewatch();
            self.scan_and_apply().await;
        }
    }

    /// Whether an event touches the filters directory or a file in it.
    fn concerns_dir(&self, change: &notify::Result<notify::Event>) -> bool {
        match change {
            Ok(event) => {
                event
                    .paths
                    .iter()
                    .any(|path| path == &self.dir || path.parent() == Some(self.dir.as_path()))
                    || event.paths.is_empty()
            }
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "filters directory watcher error; rescanning");
                true
            }
        }
    }

    /// Watches the directory itself once it exists (again).
    fn rewatch(&mut self) {
        if !self.dir.is_dir() {
            self.watching_dir = false;
            return;
        }
        if !self.watching_dir {
            match self.watcher.watch(&self.dir, RecursiveMode::NonRecursive) {
                Ok(()) => self.watching_dir = true,
                Err(error) => {
                    tracing::error!(dir = %self.dir.display(), %error, "cannot watch the filters directory")
                }
            }
        }
    }

    async fn scan_and_apply(&mut self) {
        let mut registry = std::mem::take(&mut self.registry);
        let engine = self.engine.clone();
        let dir = self.dir.clone();
        // Compiling a component takes a core for a while: not on the runtime.
        let scanned = tokio::task::spawn_blocking(move || {
            registry.rescan(&engine, &dir);
            registry
        })
        .await;
        match scanned {
            Ok(registry) => self.registry = registry,
            Err(error) => {
                tracing::error!(%error, "scanning the filters directory panicked; keeping the loaded filters");
                return;
            }
        }
        self.apply_all().await;
        self.report.send_modify(|report| report.scans += 1);
    }

    /// Brings every chain in line with the registry and reports what is
    /// not served; answers what the chains refused.
    async fn apply_all(&mut self) -> Vec<Rejected> {
        let mut rejected = self.registry.rejected();
        let active = self.registry.active();
        let mut refused = Vec::new();
        for chain in &self.chains {
            refused.extend(apply(&Topics::of(chain), &self.engine, &active).await);
        }
        rejected.extend(refused.iter().cloned());
        self.report.send_modify(|report| report.rejected = rejected);
        refused
    }

    async fn command(&mut self, command: Command) {
        match command {
            Command::Upload(component, answer) => {
                let origin = PathBuf::from(&component.origin);
                tracing::info!(topic = %component.manifest.topic, hash = %component.hash, "filter uploaded");
                self.registry.upload(*component);
                let refused = self.apply_all().await;
                let _ = answer.send(refused.into_iter().filter(|r| r.file == origin).collect());
            }
            Command::Remove(topic, answer) => {
                if self.registry.remove_upload(&topic) {
                    tracing::info!(%topic, "uploaded filter removed");
                    self.apply_all().await;
                }
                let _ = answer.send(());
            }
        }
    }

    /// Takes an upload another server made (or this one: an upload it
    /// already serves is left alone).
    async fn uploaded(&mut self, change: UploadChange) {
        match change {
            UploadChange::Put(topic, bytes) => {
                let hash = alloy_primitives::keccak256(&bytes).to_string();
                if self
                    .registry
                    .uploaded(&topic)
                    .is_some_and(|served| served.hash == hash)
                {
                    return;
                }
                let engine = self.engine.clone();
                let origin = upload_origin(&topic);
                let loaded = tokio::task::spawn_blocking(move || engine.load(&origin, &bytes))
                    .await
                    .context("compiling an upload")
                    .and_then(|loaded| loaded);
                match loaded {
                    Ok(component) if component.manifest.topic == topic => {
                        self.registry.upload(component);
                        self.apply_all().await;
                    }
                    Ok(component) => {
                        tracing::error!(%topic, declared = %component.manifest.topic, "an upload declares another topic; not served")
                    }
                    Err(error) => {
                        tracing::error!(%topic, error = format!("{error:#}"), "an upload failed to load here; not served")
                    }
                }
            }
            UploadChange::Removed(topic) => {
                if self.registry.remove_upload(&topic) {
                    self.apply_all().await;
                }
            }
        }
    }
}

/// The part of a chain the hot swap changes: its topics' actors.
struct Topics<'a> {
    chain: &'a str,
    state: &'a PipelineState,
    /// For the actors of topics added.
    metrics: &'a Metrics,
}

impl<'a> Topics<'a> {
    fn of(chain: &'a Chain) -> Self {
        Self {
            chain: &chain.name,
            state: &chain.state,
            metrics: &chain.metrics,
        }
    }

    fn rejected(&self, component: &FilterComponent, reason: String) -> Rejected {
        Rejected {
            file: PathBuf::from(&component.origin),
            reason: format!("on chain {}: {reason}", self.chain),
        }
    }
}

/// Brings a chain's actors in line with `active`; returns the swaps the
/// chain refused.
async fn apply(
    chain: &Topics<'_>,
    engine: &Arc<FilterEngine>,
    active: &BTreeMap<String, FilterComponent>,
) -> Vec<Rejected> {
    let mut refused = Vec::new();
    let running = chain.state.topics();
    for (topic, component) in active {
        let Some(handle) = running.get(topic) else {
            let counted = chain.metrics.actor(chain.chain, topic);
            match FilterHandle::spawn(
                engine.clone(),
                component.clone(),
                chain.state.log(),
                counted,
            ) {
                Ok(handle) => {
                    tracing::info!(chain = %chain.chain, %topic, file = %component.origin, "filter adds a topic");
                    chain.state.add_topic(handle);
                }
                Err(error) => {
                    let reason = format!("{error:#}");
                    tracing::error!(chain = %chain.chain, %topic, file = %component.origin, %reason, "cannot start the new topic's filter");
                    refused.push(chain.rejected(component, reason));
                }
            }
            continue;
        };
        let status = handle.status();
        if status.origin == component.origin && status.hash == component.hash {
            continue;
        }
        if let Err(reason) = handle.swap(component.clone()).await {
            tracing::error!(chain = %chain.chain, %topic, file = %component.origin, kept = %status.origin, %reason, "filter not swapped; the old one keeps serving");
            refused.push(chain.rejected(component, reason));
        }
    }
    for (topic, handle) in running.iter() {
        if !active.contains_key(topic) && chain.state.remove_topic(topic).is_some() {
            handle
                .retire(format!(
                    "the {topic} filter was removed from the server; this subscription has ended"
                ))
                .await;
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::Value;

    use super::*;
    use chainsieve_filters::testing::{self, builtin, subscribe_all};

    /// From nothing every topic gets an actor; a changed component is
    /// swapped in and an unchanged one left alone; a swap the actor refuses
    /// is reported and the old component kept; a topic gone is retired,
    /// its subscribers told why.
    #[tokio::test]
    async fn apply_adds_swaps_refuses_and_retires() {
        let (engine, _) = builtin("newHeads");
        let no_dir = std::env::temp_dir().join("chainsieve-no-filters-dir");
        let active = FilterRegistry::load(&engine, &no_dir)
            .expect("built-ins")
            .active();
        let state = PipelineState::new(
            8,
            BTreeMap::new(),
            testing::log(),
            crate::lifecycle::TrackerSettings::default(),
        );
        let metrics = Metrics::default();
        let chain = Topics {
            chain: "eth",
            state: &state,
            metrics: &metrics,
        };
        assert!(apply(&chain, &engine, &active).await.is_empty());
        assert!(state.topics().keys().eq(active.keys()), "every topic runs");
        let mut frames = subscribe_all(&state.topics()["newHeads"], 1).await;
        let logs_actor = state.topics()["logs"].status();

        let mut next = active.clone();
        let mut changed = active["newHeads"].clone();
        changed.origin = "filters/heads.wasm".into();
        changed.hash = "0x01".into();
        next.insert("newHeads".into(), changed);
        assert!(apply(&chain, &engine, &next).await.is_empty());
        assert_eq!(
            state.topics()["newHeads"].status().origin,
            "filters/heads.wasm"
        );
        let unchanged = state.topics()["logs"].status();
        assert_eq!(unchanged.loaded_at, logs_actor.loaded_at, "left alone");

        let mut wrong = active["logs"].clone();
        wrong.manifest.topic = "newHeads".into();
        wrong.origin = "filters/wrong.wasm".into();
        next.insert("newHeads".into(), wrong);
        let refused = apply(&chain, &engine, &next).await;
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].file, PathBuf::from("filters/wrong.wasm"));
        assert!(
            refused[0].reason.starts_with("on chain eth: "),
            "{}",
            refused[0].reason
        );
        assert_eq!(
            state.topics()["newHeads"].status().origin,
            "filters/heads.wasm"
        );

        next.remove("newHeads");
        assert!(apply(&chain, &engine, &next).await.is_empty());
        assert!(!state.topics().contains_key("newHeads"));
        let ended = tokio::time::timeout(Duration::from_secs(30), frames.recv())
            .await
            .expect("in time")
            .expect("the ending frame");
        let ended: Value = serde_json::from_str(&ended.to_text()).expect("JSON");
        let message = ended["params"]["error"]["message"]
            .as_str()
            .expect("an error");
        assert!(message.contains("removed from the server"), "{message}");
    }
}
