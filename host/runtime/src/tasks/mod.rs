//! The owner of every long-lived task (docs/src/operations.md, Supervision).
//!
//! A task is spawned as one of three kinds, by what its end means:
//! - [`Tasks::restarting`]: it can start again from shared state (a chain's
//!   node source resumes from the window; a webhook's worker from its
//!   cursor): run again after a backoff, its part `restarting` meanwhile.
//! - [`Tasks::part`]: it serves one part of the server (a chain's price
//!   index, the usage flush, the webhooks): its end turns that part
//!   `failed`, with the reason, and `/readyz` answers 503.
//! - [`Tasks::critical`]: the server cannot serve without it (a chain's
//!   pipeline, its source of record, the keys' follower): its end stops
//!   the server, which exits with the reason ([`Tasks::failed`], awaited
//!   by `chainsieve_http::serve`).
//!
//! A task ends by panicking, by returning an error, or by returning at all
//! before `stopping` is cancelled (a task that returns early has stopped
//! serving too). An end after `stopping` is the server stopping, never a
//! failure.

#[cfg(feature = "fault-hooks")]
pub mod faults;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use futures_util::FutureExt as _;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The first wait before a task is started again; it doubles (with
/// jitter) up to [`MAX_RESTART_DELAY`].
pub const MIN_RESTART_DELAY: Duration = Duration::from_secs(1);

/// The longest wait before a task is started again. A run that lasted
/// longer than this starts the next wait from [`MIN_RESTART_DELAY`]
/// again: it was a new failure, not the same one repeating.
pub const MAX_RESTART_DELAY: Duration = Duration::from_secs(30);

/// What a supervised part of the server is: one chain (its entry in
/// `/readyz`), or a service of the whole server (`webhooks`, `usage`, …,
/// listed under `parts`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    Chain(String),
    Service(&'static str),
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Chain(name) => f.write_str(name),
            Part::Service(name) => f.write_str(name),
        }
    }
}

/// Why a part is not ready because of one of its tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trouble {
    /// The task ended and is started again after a backoff.
    Restarting { reason: String },
    /// The task ended for good.
    Failed { reason: String },
}

impl Trouble {
    /// The state `/readyz` gives the part.
    pub fn state(&self) -> &'static str {
        match self {
            Trouble::Restarting { .. } => "restarting",
            Trouble::Failed { .. } => "failed",
        }
    }

    pub fn reason(&self) -> &str {
        match self {
            Trouble::Restarting { reason } | Trouble::Failed { reason } => reason,
        }
    }
}

/// What a supervised task's future gives back: nothing, or an error
/// saying why it stopped.
pub trait Outcome: Send + 'static {
    fn into_result(self) -> anyhow::Result<()>;
}

impl Outcome for () {
    fn into_result(self) -> anyhow::Result<()> {
        Ok(())
    }
}

impl Outcome for anyhow::Result<()> {
    fn into_result(self) -> anyhow::Result<()> {
        self
    }
}

/// One task's standing, for `/readyz` and `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct Standing {
    /// Why its part is not ready because of it; `None` while it runs.
    pub trouble: Option<Trouble>,
    /// How many times it was started again.
    pub restarts: u64,
}

/// The supervisor: spawns every long-lived task on one tracker, watches
/// how each ends, and keeps what `/readyz` and `/metrics` say of them.
#[derive(Clone, Debug)]
pub struct Tasks {
    /// What the server waits for at shutdown ([`Tasks::close`],
    /// [`Tasks::wait`]).
    tracker: TaskTracker,
    /// Cancelled when the tasks are to stop: an end after it is expected.
    stopping: CancellationToken,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Each part's tasks by name and their standing: a std mutex, held
    /// only to read or change the map, never across an await.
    parts: Mutex<BTreeMap<Part, BTreeMap<String, Standing>>>,
    /// The first critical task's failure, set once: the server stops on
    /// it.
    fatal: watch::Sender<Option<String>>,
    /// Told of every change of a standing, for whoever waits for one.
    changed: watch::Sender<()>,
    #[cfg(feature = "fault-hooks")]
    faults: faults::Faults,
}

/// How a supervised task's end is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Critical,
    Part,
    Restarting,
    /// [`Kind::Restarting`], but a return is its end.
    Member,
}

impl Tasks {
    /// A supervisor whose tasks stop when `stopping` is cancelled.
    pub fn new(stopping: CancellationToken) -> Self {
        Self {
            tracker: TaskTracker::new(),
            stopping,
            shared: Arc::new(Shared {
                parts: Mutex::default(),
                fatal: watch::Sender::new(None),
                changed: watch::Sender::new(()),
                #[cfg(feature = "fault-hooks")]
                faults: faults::Faults::default(),
            }),
        }
    }

    /// Runs `task`, which the server cannot serve without: its end before
    /// `stopping` stops the server with the reason.
    pub fn critical<F>(&self, name: impl Into<String>, part: Part, task: F)
    where
        F: Future<Output: Outcome> + Send + 'static,
    {
        self.supervise(name.into(), part, Kind::Critical, once(task));
    }

    /// Runs `task`, which serves `part`: its end before `stopping` turns
    /// the part failed, with the reason.
    pub fn part<F>(&self, name: impl Into<String>, part: Part, task: F)
    where
        F: Future<Output: Outcome> + Send + 'static,
    {
        self.supervise(name.into(), part, Kind::Part, once(task));
    }

    /// Runs the tasks `make` makes, one after another: each time one ends
    /// before `stopping`, `part` is restarting with the reason, and after
    /// a backoff the next one runs.
    pub fn restarting<M, F>(&self, name: impl Into<String>, part: Part, make: M)
    where
        M: FnMut() -> F + Send + 'static,
        F: Future<Output: Outcome> + Send + 'static,
    {
        self.supervise(name.into(), part, Kind::Restarting, make);
    }

    /// A member of a group its owner stops and waits for by itself, on
    /// `tracker` until `stop` (a webhook's worker, whose state its webhook
    /// reports): started again after a backoff when it panics or fails; a
    /// return is its end (a webhook paused). Its faults are injected
    /// through this supervisor.
    pub fn restarting_on<M, F>(
        &self,
        tracker: &TaskTracker,
        stop: CancellationToken,
        name: impl Into<String>,
        make: M,
    ) -> tokio::task::JoinHandle<()>
    where
        M: FnMut() -> F + Send + 'static,
        F: Future<Output: Outcome> + Send + 'static,
    {
        tracker.spawn(self.watch(name.into(), None, Kind::Member, stop).run(make))
    }

    fn supervise<M, F>(&self, name: String, part: Part, kind: Kind, make: M)
    where
        M: FnMut() -> F + Send + 'static,
        F: Future<Output: Outcome> + Send + 'static,
    {
        self.shared
            .lock()
            .entry(part.clone())
            .or_default()
            .insert(name.clone(), Standing::default());
        let watch = self.watch(name, Some(part), kind, self.stopping.clone());
        self.tracker.spawn(watch.run(make));
    }

    fn watch(
        &self,
        name: String,
        part: Option<Part>,
        kind: Kind,
        stop: CancellationToken,
    ) -> Watch {
        Watch {
            shared: self.shared.clone(),
            name,
            part,
            kind,
            stop,
        }
    }

    /// The first critical task's failure, once there is one.
    pub async fn failed(&self) -> String {
        let mut fatal = self.shared.fatal.subscribe();
        let reason = fatal
            .wait_for(Option::is_some)
            .await
            .map(|reason| reason.clone().unwrap_or_default());
        match reason {
            Ok(reason) => reason,
            // The sender lives in `shared`, as long as `self`.
            Err(_) => std::future::pending().await,
        }
    }

    /// Told each time a task's standing changes (its trouble, its
    /// restarts): wait on it for a standing to become what is expected.
    pub fn changes(&self) -> watch::Receiver<()> {
        self.shared.changed.subscribe()
    }

    /// Every part and its tasks' standing, now.
    pub fn standings(&self) -> BTreeMap<Part, BTreeMap<String, Standing>> {
        self.shared.lock().clone()
    }

    /// What keeps `part` from being ready, if anything: the first of its
    /// tasks in trouble.
    pub fn trouble(&self, part: &Part) -> Option<Trouble> {
        trouble_among(self.shared.lock().get(part)?).cloned()
    }

    /// The tracker, for tasks whose end is theirs to decide (a lease's
    /// keeper, which ends with its claim): shutdown waits for them too.
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Lets [`Tasks::wait`] return once every task has ended.
    pub fn close(&self) {
        self.tracker.close();
    }

    /// Waits for every task to end (after [`Tasks::close`]).
    pub async fn wait(&self) {
        self.tracker.wait().await;
    }

    /// Makes the task `name` fail at its next poll, as `fault` says (the
    /// fault hooks of the tests; docs/src/operations.md, Supervision).
    #[cfg(feature = "fault-hooks")]
    pub fn inject(&self, name: &str, fault: faults::Fault) {
        self.shared.faults.inject(name, fault);
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Part, BTreeMap<String, Standing>>> {
        self.parts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the standing of `part`'s task `name`.
    fn stand(&self, part: &Part, name: &str, change: impl FnOnce(&mut Standing)) {
        if let Some(standing) = self
            .lock()
            .get_mut(part)
            .and_then(|tasks| tasks.get_mut(name))
        {
            change(standing);
        }
        self.changed.send_replace(());
    }
}

/// One supervised task, watched until it ends for good.
struct Watch {
    shared: Arc<Shared>,
    name: String,
    part: Option<Part>,
    kind: Kind,
    stop: CancellationToken,
}

impl Watch {
    async fn run<M, F>(self, mut make: M)
    where
        M: FnMut() -> F + Send + 'static,
        F: Future<Output: Outcome> + Send + 'static,
    {
        let mut delays = backoff();
        loop {
            let started = Instant::now();
            let ended = self.attempt(make()).await;
            if self.stop.is_cancelled() {
                return;
            }
            let reason = match ended {
                Err(reason) => reason,
                Ok(()) if self.kind == Kind::Member => return,
                Ok(()) => "it returned before the server stopped".to_string(),
            };
            let reason = format!("{} stopped: {reason}", self.name);
            match self.kind {
                Kind::Critical => {
                    tracing::error!(task = %self.name, %reason, "a task the server cannot serve without stopped; the server stops");
                    self.shared.fatal.send_if_modified(|fatal| {
                        let first = fatal.is_none();
                        if first {
                            *fatal = Some(reason.clone());
                        }
                        first
                    });
                    self.set(Trouble::Failed { reason });
                    return;
                }
                Kind::Part => {
                    tracing::error!(task = %self.name, part = ?self.part, %reason, "a task stopped; its part is not ready");
                    self.set(Trouble::Failed { reason });
                    return;
                }
                Kind::Restarting | Kind::Member => {
                    if started.elapsed() > MAX_RESTART_DELAY {
                        delays = backoff();
                    }
                    let delay = delays.next().unwrap_or(MAX_RESTART_DELAY);
                    let reason = format!("{reason}; started again in {} ms", delay.as_millis());
                    tracing::warn!(task = %self.name, %reason, "a task stopped; it is started again");
                    self.set(Trouble::Restarting { reason });
                    tokio::select! {
                        () = self.stop.cancelled() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                    if let Some(part) = &self.part {
                        self.shared.stand(part, &self.name, |standing| {
                            standing.trouble = None;
                            standing.restarts += 1;
                        });
                    }
                }
            }
        }
    }

    /// One run of the task: its own end, or why it ended (its error, its
    /// panic's message).
    async fn attempt<F>(&self, task: F) -> Result<(), String>
    where
        F: Future<Output: Outcome> + Send + 'static,
    {
        let task = async move { task.await.into_result() };
        #[cfg(feature = "fault-hooks")]
        let task = self.shared.faults.around(&self.name, task);
        match AssertUnwindSafe(task).catch_unwind().await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(format!("{error:#}")),
            Err(panic) => Err(format!("panicked: {}", panic_message(panic.as_ref()))),
        }
    }

    fn set(&self, trouble: Trouble) {
        if let Some(part) = &self.part {
            self.shared.stand(part, &self.name, |standing| {
                standing.trouble = Some(trouble)
            });
        }
    }
}

/// What keeps a part from being ready among its `tasks`' standings: the
/// first one's trouble.
pub fn trouble_among(tasks: &BTreeMap<String, Standing>) -> Option<&Trouble> {
    tasks
        .values()
        .find_map(|standing| standing.trouble.as_ref())
}

/// A task of one run, as the supervisor makes its runs.
fn once<F>(task: F) -> impl FnMut() -> F + Send + 'static
where
    F: Send + 'static,
{
    let mut task = Some(task);
    move || task.take().expect("a task of one run is made once")
}

/// The waits between restarts: from [`MIN_RESTART_DELAY`], doubling with
/// jitter, to [`MAX_RESTART_DELAY`], without end.
fn backoff() -> impl Iterator<Item = Duration> + Send {
    ExponentialBuilder::default()
        .with_min_delay(MIN_RESTART_DELAY)
        .with_max_delay(MAX_RESTART_DELAY)
        .with_jitter()
        .without_max_times()
        .build()
}

/// A panic's message: what `panic!` was given, when it was text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

#[cfg(test)]
mod tests;
