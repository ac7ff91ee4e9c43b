//! One webhook's delivery: its subscription's notifications, taken from
//! its own queue in batches, each POSTed until the receiver accepts it,
//! then the next (docs/src/architecture.md, Webhooks).
//!
//! Nothing is skipped and nothing repeated past the cursor: a batch's
//! last cursor is recorded as in flight before its first try, and as
//! delivered once the receiver answers 2xx (written with the next batch's
//! in-flight mark when that batch goes at once, else at once). A receiver
//! slower than the
//! chain lets the queue overflow; the worker delivers what was queued
//! before the overflow (a gapless prefix: nothing is queued after it),
//! then opens the subscription again after its cursor, which replays the
//! log (or history) at the receiver's pace. A subscription the server ends
//! (its component removed, its cursor gone) is opened again after a pause,
//! until the webhook has failed for `pause_after_secs` and is paused.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use url::Url;

use super::body;
use super::definition::{Definition, Paused, Progress, State, Trouble, TroubleKind, topic};
use super::feed::{Feeds, Opened};
use super::post::{Envelope, Line, Outcome, Transport};
use super::store::Store;
use chainsieve_config::WebhooksConfig;
use chainsieve_fanout::{Frame, Frames, Notice, Sink};

/// What the service and every worker share.
pub(super) struct Shared {
    pub feeds: Arc<dyn Feeds>,
    pub store: Arc<dyn Store>,
    pub transport: Arc<dyn Transport>,
    pub config: WebhooksConfig,
    /// Unix milliseconds now ([`now_ms`]; tokio's paused clock in tests).
    pub clock: fn() -> u64,
    /// Deliveries accepted and tries failed, since the process started.
    pub deliveries: AtomicU64,
    pub failures: AtomicU64,
}

/// One webhook as this process holds it: read by the API, changed by the
/// API (pause, resume) only while no worker runs, and by its worker.
#[derive(Debug)]
pub(super) struct Hook {
    /// The webhook's id (fixed): read without locking the definition.
    id: String,
    /// Short critical sections only, never held across an await, and
    /// never one lock taken while the other is held.
    definition: Mutex<Definition>,
    progress: Mutex<Progress>,
    /// Notifications waiting (queued, taken, in flight), for `/metrics`.
    backlog: AtomicUsize,
    /// Since when the oldest waiting notification waits, for `/metrics`.
    behind_since: Mutex<Option<Instant>>,
    /// The store's revision of `definition`: a change the store reports
    /// at or below it is one this process wrote or already applied.
    revision: AtomicU64,
    /// Whether this process holds the webhook's claim: its progress is
    /// then written here, not taken from the store's changes.
    held: AtomicBool,
    /// Whether `progress` holds a delivery the store does not have yet:
    /// written with the next batch's in-flight mark when that batch goes
    /// at once, else at once (and in any case before the worker stops).
    unsaved: AtomicBool,
}

impl Hook {
    pub fn new(definition: Definition, revision: u64, progress: Progress) -> Self {
        Self {
            id: definition.id.clone(),
            definition: Mutex::new(definition),
            progress: Mutex::new(progress),
            backlog: AtomicUsize::new(0),
            behind_since: Mutex::new(None),
            revision: AtomicU64::new(revision),
            held: AtomicBool::new(false),
            unsaved: AtomicBool::new(false),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The state `webhook_get` shows, each lock taken in turn.
    pub fn state(&self) -> State {
        let paused = self.definition().paused.is_some();
        let trouble = self.progress().trouble.as_ref().map(|trouble| trouble.kind);
        State::of(paused, trouble)
    }

    /// Takes `progress` read from the store, unless this process holds the
    /// claim (it writes the progress itself); checked under the progress
    /// lock, which the claim's holder takes to set `held`.
    pub fn show_progress(&self, progress: Progress) {
        let mut shown = self.progress();
        if !self.held() {
            *shown = progress;
        }
    }

    /// Marks the claim held and takes the progress read fresh with it, in
    /// one step under the progress lock: a change read before cannot
    /// overwrite it.
    pub fn hold(&self, progress: Progress) {
        let mut shown = self.progress();
        self.held.store(true, Ordering::Release);
        *shown = progress;
    }

    pub fn revision(&self) -> u64 {
        self.revision.load(Ordering::Acquire)
    }

    /// Takes `definition`, at `revision` of the store, unless it holds a
    /// later one (a read that raced a change applied meanwhile).
    pub fn set_definition(&self, definition: Definition, revision: u64) {
        let mut held = self.definition();
        if revision >= self.revision() {
            *held = definition;
            self.revision.store(revision, Ordering::Release);
        }
    }

    pub fn held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    pub fn set_held(&self, held: bool) {
        self.held.store(held, Ordering::Release);
    }

    pub fn definition(&self) -> MutexGuard<'_, Definition> {
        self.definition
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn progress(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notifications waiting, and for how long the oldest has.
    pub fn waiting(&self) -> (usize, Option<Duration>) {
        let since = *self
            .behind_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (
            self.backlog.load(Ordering::Relaxed),
            since.map(|since| since.elapsed()),
        )
    }

    fn set_waiting(&self, count: usize) {
        self.backlog.store(count, Ordering::Relaxed);
        let mut since = self
            .behind_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match count {
            0 => *since = None,
            _ => {
                since.get_or_insert_with(Instant::now);
            }
        }
    }

    /// Changes the progress and writes it; done once durable, or the
    /// store's error.
    async fn record(
        &self,
        store: &dyn Store,
        change: impl FnOnce(&mut Progress),
    ) -> anyhow::Result<()> {
        change(&mut self.progress());
        self.persist(store).await
    }

    /// Writes the progress as it is; done once durable.
    async fn persist(&self, store: &dyn Store) -> anyhow::Result<()> {
        let progress = {
            let progress = self.progress();
            self.unsaved.store(false, Ordering::Release);
            progress.clone()
        };
        let written = store.put_progress(self.id.clone(), progress).await;
        if written.is_err() {
            self.unsaved.store(true, Ordering::Release);
        }
        written
    }

    /// Changes the progress for a delivery the receiver accepted, to be
    /// written later ([`Hook::unsaved`]).
    fn delivered(&self, change: impl FnOnce(&mut Progress)) {
        let mut progress = self.progress();
        change(&mut progress);
        self.unsaved.store(true, Ordering::Release);
    }

    fn unsaved(&self) -> bool {
        self.unsaved.load(Ordering::Acquire)
    }

    /// Pauses the webhook at `at` for `reason` and writes it.
    pub async fn pause(&self, store: &dyn Store, at: u64, reason: String) {
        let definition = {
            let mut definition = self.definition();
            definition.paused = Some(Paused { at, reason });
            definition.clone()
        };
        match store
            .put_definition(definition.clone(), self.revision())
            .await
        {
            Ok(revision) => self.revision.store(revision, Ordering::Release),
            Err(error) => {
                tracing::error!(webhook = %definition.id, error = format!("{error:#}"), "cannot persist a paused webhook");
            }
        }
    }
}

/// Unix milliseconds now.
pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// Delivers `hook` until `stop` is cancelled or it pauses; `first`: the
/// subscription its creation (or resume) opened. The last delivery is
/// written before it returns.
pub(super) async fn run(
    hook: Arc<Hook>,
    shared: Arc<Shared>,
    stop: CancellationToken,
    first: Option<(Opened, Frames)>,
) {
    deliver_all(&hook, &shared, &stop, first).await;
    if hook.unsaved()
        && let Err(error) = hook.persist(&*shared.store).await
    {
        tracing::warn!(webhook = %hook.id(), error = format!("{error:#}"), "cannot store a webhook's last delivery; it will come again under its id");
    }
}

async fn deliver_all(
    hook: &Hook,
    shared: &Shared,
    stop: &CancellationToken,
    mut first: Option<(Opened, Frames)>,
) {
    let mut tries = 0;
    let mut line = Line::default();
    loop {
        let (opened, frames) = match first.take() {
            Some(open) => open,
            None => {
                let (sink, frames) = Sink::new(shared.config.queue);
                let definition = hook.definition().clone();
                let cursor = hook.progress().cursor.clone();
                let opened = tokio::select! {
                    () = stop.cancelled() => return,
                    opened = shared.feeds.open(&definition, cursor.as_deref(), sink) => opened,
                };
                match opened {
                    Ok(opened) => (opened, frames),
                    Err(refusal) => {
                        let kind = if refusal.transient() {
                            TroubleKind::Retrying
                        } else {
                            TroubleKind::Failing
                        };
                        let reason = format!("its subscription could not be opened: {refusal}");
                        if !setback(hook, shared, stop, kind, reason, None, &mut tries).await {
                            return;
                        }
                        continue;
                    }
                }
            }
        };
        let ended = pump(hook, shared, &mut line, frames, stop).await;
        opened.close().await;
        match ended {
            Ended::Stop => return,
            Ended::CaughtUp => tries = 0,
            Ended::Closed(reason) => {
                if !setback(
                    hook,
                    shared,
                    stop,
                    TroubleKind::Retrying,
                    reason,
                    None,
                    &mut tries,
                )
                .await
                {
                    return;
                }
            }
        }
    }
}

/// Why a subscription's delivery ended.
enum Ended {
    /// Stopped, or paused.
    Stop,
    /// Its queue overflowed and what it held is delivered: read on from
    /// the cursor.
    CaughtUp,
    /// The server ended the subscription, for this reason.
    Closed(String),
}

/// Delivers one subscription's notifications, batch after batch.
async fn pump(
    hook: &Hook,
    shared: &Shared,
    line: &mut Line,
    mut frames: Frames,
    stop: &CancellationToken,
) -> Ended {
    let definition = hook.definition().clone();
    let url = match Url::parse(&definition.url) {
        Ok(url) => url,
        Err(error) => return Ended::Closed(format!("its url cannot be read: {error}")),
    };
    let max = definition.batch.max_events.max(1);
    let max_wait = Duration::from_millis(definition.batch.max_wait_ms);
    // After a restart, the first batch ends where the one in flight did,
    // so it carries the same delivery id.
    let mut inflight = hook.progress().inflight.clone();
    let mut taken = VecDeque::new();
    let mut unwritten = Vec::new();
    let mut closed = false;
    loop {
        if taken.is_empty() && !closed {
            hook.set_waiting(frames.queued());
            let round = tokio::select! {
                () = stop.cancelled() => return Ended::Stop,
                round = frames.take(&mut taken, &mut unwritten, max) => round,
            };
            match round {
                chainsieve_fanout::Round::Frames => {}
                chainsieve_fanout::Round::Closing => closed = true,
                chainsieve_fanout::Round::Gone => {
                    return Ended::Closed("its subscription ended".into());
                }
            }
        }
        let wait = match &inflight {
            Some(cursor) if !holds(&taken, cursor) => max_wait.max(Duration::from_secs(1)),
            _ => max_wait,
        };
        if !closed && taken.len() < max && !wait.is_zero() {
            let deadline = tokio::time::Instant::now() + wait;
            while !closed
                && taken.len() < max
                && !inflight.as_deref().is_some_and(|c| holds(&taken, c))
            {
                let more = max - taken.len();
                let round = tokio::select! {
                    () = stop.cancelled() => return Ended::Stop,
                    () = tokio::time::sleep_until(deadline) => break,
                    round = frames.take(&mut taken, &mut unwritten, more) => round,
                };
                match round {
                    chainsieve_fanout::Round::Frames => {}
                    chainsieve_fanout::Round::Closing => closed = true,
                    chainsieve_fanout::Round::Gone => break,
                }
            }
        }
        // What is queued goes along, up to the batch's size; after a
        // close, all of it (nothing more will come).
        while closed || taken.len() < max {
            match frames.try_recv() {
                Some(frame) => taken.push_back(frame),
                None => break,
            }
        }
        let (notices, ended) = cut(&mut taken, max, inflight.take().as_deref());
        hook.set_waiting(taken.len() + notices.len() + frames.queued());
        if !notices.is_empty()
            && !deliver(hook, shared, line, &definition, &url, notices, stop).await
        {
            return Ended::Stop;
        }
        // A batch that goes at once carries this delivery's cursor with
        // its in-flight mark: one write a batch while a backlog drains.
        let next_at_once = ended.is_none()
            && !(closed && taken.is_empty())
            && max_wait.is_zero()
            && (!taken.is_empty() || frames.queued() > 0);
        if hook.unsaved() && !next_at_once && !save(hook, shared, stop).await {
            return Ended::Stop;
        }
        if let Some(reason) = ended {
            return Ended::Closed(reason);
        }
        if closed && taken.is_empty() {
            return Ended::CaughtUp;
        }
    }
}

/// Whether `frames` hold the notification of `cursor`.
fn holds(frames: &VecDeque<Frame>, cursor: &str) -> bool {
    frames.iter().any(|frame| match frame {
        Frame::Notification { notice, .. } => notice.cursor() == Some(cursor),
        _ => false,
    })
}

/// The next batch: up to `max` notifications from the front of `frames`,
/// ending at `until`'s if it is among them, or before the frame that ended
/// the subscription (taken, and its reason given).
fn cut(
    frames: &mut VecDeque<Frame>,
    max: usize,
    until: Option<&str>,
) -> (Vec<Notice>, Option<String>) {
    let mut notices = Vec::new();
    while notices.len() < max {
        match frames.pop_front() {
            Some(Frame::Notification { notice, .. }) => {
                let last = until.is_some() && notice.cursor() == until;
                notices.push(notice);
                if last {
                    break;
                }
            }
            Some(Frame::Text(text)) => return (notices, Some(ending(&text))),
            // A webhook's queue has no pings or pongs.
            Some(Frame::Ping | Frame::Pong(_)) => {}
            None => break,
        }
    }
    (notices, None)
}

/// Why the server ended a subscription, from its last frame.
fn ending(text: &str) -> String {
    let error = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|frame| frame.pointer("/params/error").cloned());
    match error {
        Some(error) => format!(
            "its subscription ended: {} ({})",
            error["message"].as_str().unwrap_or("no reason given"),
            error["code"]
        ),
        None => format!("its subscription ended: {text}"),
    }
}

/// POSTs one batch until the receiver accepts it; false if stopped or
/// paused first.
async fn deliver(
    hook: &Hook,
    shared: &Shared,
    line: &mut Line,
    definition: &Definition,
    url: &Url,
    notices: Vec<Notice>,
    stop: &CancellationToken,
) -> bool {
    let last = notices
        .iter()
        .rev()
        .find_map(Notice::cursor)
        .map(str::to_owned);
    let delivery = last
        .clone()
        .unwrap_or_else(|| format!("{}:{}", definition.id, hook.progress().deliveries + 1));
    let body = body::encode(
        &definition.id,
        &definition.chain,
        topic(&definition.subscribe),
        &delivery,
        &notices,
    );
    let envelope = Envelope {
        webhook: &definition.id,
        delivery: &delivery,
        secret: &definition.secret,
    };
    // A webhook whose key was revoked or expired delivers no more: it
    // pauses, saying why (the batch in flight, if any, went already).
    if let Some(reason) = shared.feeds.owner_refusal(&definition.owner) {
        hook.pause(&*shared.store, (shared.clock)(), reason).await;
        return false;
    }
    let mut tries = 0;
    // Never POSTed before the store holds it as in flight.
    loop {
        let marked = hook.record(&*shared.store, |progress| {
            progress.inflight = Some(delivery.clone());
        });
        let Err(error) = marked.await else { break };
        let reason = format!("its progress could not be stored: {error:#}");
        if !setback(
            hook,
            shared,
            stop,
            TroubleKind::Retrying,
            reason,
            None,
            &mut tries,
        )
        .await
        {
            return false;
        }
    }
    loop {
        // An answer that came is recorded even if a stop came too: the
        // batch is not delivered twice for nothing.
        let outcome = tokio::select! {
            biased;
            outcome = shared.transport.post(line, url, envelope, body.clone()) => outcome,
            () = stop.cancelled() => return false,
        };
        let (kind, reason, after) = match outcome {
            Outcome::Delivered => {
                let count = notices.len() as u64;
                shared.deliveries.fetch_add(1, Ordering::Relaxed);
                if let Some(meter) = shared.feeds.meter_of(&definition.owner) {
                    meter.webhook_delivered(count, body.len() as u64);
                }
                // Written by the caller: with the next batch's in-flight
                // mark if that batch goes at once, else now.
                hook.delivered(|progress| {
                    if last.is_some() {
                        progress.cursor = last;
                    }
                    progress.inflight = None;
                    progress.deliveries += 1;
                    progress.notifications += count;
                    progress.last_delivery_at = Some((shared.clock)());
                    progress.trouble = None;
                });
                return true;
            }
            Outcome::Retry { reason, after } => (TroubleKind::Retrying, reason, after),
            Outcome::Refused { reason } => (TroubleKind::Failing, reason, None),
        };
        if !setback(hook, shared, stop, kind, reason, after, &mut tries).await {
            return false;
        }
    }
}

/// Records a failed try and waits its turn for the next (`after`, or
/// the backoff); false if stopped meanwhile, or if the webhook has failed
/// for `pause_after_secs` and is now paused.
async fn setback(
    hook: &Hook,
    shared: &Shared,
    stop: &CancellationToken,
    kind: TroubleKind,
    reason: String,
    after: Option<Duration>,
    tries: &mut u32,
) -> bool {
    shared.failures.fetch_add(1, Ordering::Relaxed);
    let now = (shared.clock)();
    let mut since = now;
    hook.record(&*shared.store, |progress| {
        progress.failures += 1;
        since = progress
            .trouble
            .as_ref()
            .map_or(now, |trouble| trouble.since);
        progress.trouble = Some(Trouble {
            kind,
            since,
            last_error: reason.clone(),
        });
    })
    .await
    .unwrap_or_else(|error| {
        tracing::warn!(webhook = %hook.id(), error = format!("{error:#}"), "cannot store a webhook's trouble");
    });
    let pause_after = shared.config.pause_after_secs.saturating_mul(1_000);
    let failing = now.saturating_sub(since);
    if failing >= pause_after {
        let reason = format!("failed for {} s: {reason}", failing / 1_000);
        hook.pause(&*shared.store, now, reason).await;
        return false;
    }
    // A receiver's Retry-After is honoured, never below the backoff.
    let delay = after
        .unwrap_or_default()
        .max(backoff(*tries, &shared.config))
        // Tried once more when the time to pause comes.
        .min(Duration::from_millis(pause_after - failing));
    *tries = tries.saturating_add(1);
    tokio::select! {
        () = stop.cancelled() => false,
        () = tokio::time::sleep(delay) => true,
    }
}

/// Writes the progress of a delivery no batch follows at once, tried
/// until it is stored (the receiver has it; delivering it again is
/// worse); false if stopped meanwhile.
async fn save(hook: &Hook, shared: &Shared, stop: &CancellationToken) -> bool {
    let mut tries = 0;
    loop {
        let Err(error) = hook.persist(&*shared.store).await else {
            return true;
        };
        let reason = format!("its progress could not be stored: {error:#}");
        if !retry_store(hook, stop, reason, &mut tries, &shared.config).await {
            return false;
        }
    }
}

/// Waits its turn to store the progress again after `reason` (logged;
/// the delivery is done, so nothing is recorded as trouble); false if
/// stopped meanwhile.
async fn retry_store(
    hook: &Hook,
    stop: &CancellationToken,
    reason: String,
    tries: &mut u32,
    config: &WebhooksConfig,
) -> bool {
    tracing::warn!(webhook = %hook.id(), %reason, "storing a webhook's progress again");
    let delay = backoff(*tries, config);
    *tries = tries.saturating_add(1);
    tokio::select! {
        () = stop.cancelled() => false,
        () = tokio::time::sleep(delay) => true,
    }
}

/// The delay before try `tries + 1`: `retry_initial_ms` doubled each try,
/// at most `retry_max_ms`, less up to half at random (so webhooks failing
/// together do not retry together).
fn backoff(tries: u32, config: &WebhooksConfig) -> Duration {
    let full = config
        .retry_initial_ms
        .saturating_mul(1u64 << tries.min(32))
        .min(config.retry_max_ms);
    let jitter = rand::random_range(0..=full / 2);
    Duration::from_millis(full - jitter)
}

#[cfg(test)]
mod tests;
