//! The actor's supervision (rebuild, disable, swap) and resume replay, on
//! stand-in instances.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use chainsieve_filter_core::{Matches, Source};
use chainsieve_watchlists::views::View;

use super::*;
use crate::contract::Delivery;
use crate::testing::{builtin, subscribe_all, to_everything};
use chainsieve_config::LogConfig;
use chainsieve_eventlog::cursor::{Cursor, ResumeError, ResumeFrom};
use chainsieve_fanout::testing::Pipe;
use chainsieve_fanout::{self as fanout, Frame, Frames, Notice};
use chainsieve_ingest::devnet::{Devnet, DevnetSettings};
use chainsieve_model::{Block, ChainEvent, Grade};
use chainsieve_runtime::metrics::Metrics;
use tokio::sync::oneshot;

/// What the stand-ins do, shared with the test that scripts them.
#[derive(Default)]
struct Script {
    /// The outcomes of the next `match_batch` calls, in order: an
    /// error message, or `None` for a normal answer. Empty: normal.
    batches: VecDeque<Option<String>>,
    /// Every subscription is refused with this, while set.
    refuse: Option<String>,
    /// Instances made so far.
    made: usize,
    /// Every subscription an instance took: (instance, key), the first
    /// instance being 1.
    subscribed: Vec<(usize, u64)>,
    /// The next `match_batch` call says it began, then waits for the
    /// test to let it go on.
    hold: Option<(oneshot::Sender<()>, std::sync::mpsc::Receiver<()>)>,
}

/// Makes stand-in instances that follow one script.
#[derive(Clone, Default)]
struct StandIns(Arc<Mutex<Script>>);

impl StandIns {
    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.0.lock().expect("script lock")
    }
}

impl Instantiate for StandIns {
    fn instantiate(&self, _: &FilterComponent) -> anyhow::Result<Box<dyn Instance>> {
        let mut script = self.script();
        script.made += 1;
        Ok(Box::new(StandIn {
            script: self.clone(),
            number: script.made,
            keys: Vec::new(),
        }))
    }
}

/// Matches the first event of every batch to every subscription, or
/// fails as scripted (a trap, a deadline: to the actor both are a
/// failed call).
struct StandIn {
    script: StandIns,
    /// Which instance this is, from 1.
    number: usize,
    keys: Vec<u64>,
}

impl Instance for StandIn {
    fn subscribe(&mut self, key: u64, _: &str) -> anyhow::Result<Result<Delivery, String>> {
        let mut script = self.script.script();
        if let Some(refusal) = &script.refuse {
            return Ok(Err(refusal.clone()));
        }
        script.subscribed.push((self.number, key));
        self.keys.push(key);
        Ok(Ok(Delivery::Kind(chainsieve_filter_core::Payload::Hash)))
    }

    fn unsubscribe(&mut self, key: u64) -> anyhow::Result<()> {
        self.keys.retain(|k| *k != key);
        Ok(())
    }

    fn match_batch(&mut self, _: &[u8], _: Option<&View>) -> anyhow::Result<Matches> {
        let hold = self.script.script().hold.take();
        if let Some((began, go_on)) = hold {
            let _ = began.send(());
            go_on.recv().expect("the test lets the call go on");
        }
        if let Some(Some(error)) = self.script.script().batches.pop_front() {
            anyhow::bail!(error);
        }
        Ok(Matches {
            events: vec![0; self.keys.len()],
            subscriptions: self.keys.clone(),
            ..Matches::default()
        })
    }
}

struct Harness {
    stand_ins: StandIns,
    handle: FilterHandle,
    component: FilterComponent,
    frames: Frames,
    heads: Vec<Arc<Block>>,
    /// The chain's log: [`Harness::send`] appends to it.
    log: Arc<EventLog>,
    /// The cursor of each head sent, by head.
    cursors: HashMap<usize, String>,
}

/// A newHeads actor on stand-ins, with subscription 1 to everything.
async fn harness() -> Harness {
    harness_with(1_024).await
}

/// [`harness`] over a log of `blocks` blocks.
async fn harness_with(blocks: usize) -> Harness {
    let (_, component) = builtin("newHeads");
    let stand_ins = StandIns::default();
    let metrics = Metrics::default().actor("eth", "newHeads");
    let log = Arc::new(EventLog::new(
        "eth",
        blocks,
        LogConfig::default().memory_mib,
    ));
    let handle = FilterHandle::spawn(
        Arc::new(stand_ins.clone()),
        component.clone(),
        &log,
        metrics,
    )
    .expect("actor");
    let frames = subscribe_all(&handle, 1).await;
    let mut devnet = Devnet::new(1, &DevnetSettings::default());
    let heads = std::iter::once(devnet.genesis())
        .chain(
            std::iter::repeat_with(|| devnet.next_step())
                .flatten()
                .filter_map(|event| match event {
                    chainsieve_model::SourceEvent::Block(block) => Some(block),
                    _ => None,
                }),
        )
        .take(32)
        .collect();
    Harness {
        stand_ins,
        handle,
        component,
        frames,
        heads,
        log,
        cursors: HashMap::new(),
    }
}

impl Harness {
    /// Appends head `n` to the log, as the pipeline would, without handing
    /// it to the actor (as for an actor without subscribers).
    fn log_only(&mut self, n: usize) -> Arc<EventBatch> {
        let step = self.log.append(ChainEvent::Added(self.heads[n].clone()));
        let batch = EventBatch::stream_of(&step, self.log.chain(), Source::Heads).expect("a head");
        self.cursors
            .insert(n, batch.cursor(0).expect("logged").to_string());
        Arc::new(batch)
    }

    /// Appends head `n` to the log and hands its batch to the actor.
    async fn send(&mut self, n: usize) {
        let batch = self.log_only(n);
        assert!(self.handle.send_batch(batch).await, "actor running");
    }

    /// The next frame the subscriber gets.
    async fn next(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(30), self.frames.recv())
            .await
            .expect("a frame in time")
            .expect("the sink is open")
            .to_text()
    }

    /// Subscription 1's notification for head `n`.
    fn head(&self, n: usize) -> String {
        self.head_to("0x1", n)
    }

    /// The notification of head `n` to subscription `id`.
    fn head_to(&self, id: &str, n: usize) -> String {
        self.head_frame(id, n).to_text()
    }

    fn head_frame(&self, id: &str, n: usize) -> Frame {
        Frame::Notification {
            subscription: id.into(),
            notice: Notice::new(
                &format!("\"{}\"", self.heads[n].hash),
                Some(&self.cursors[&n]),
            ),
        }
    }

    /// Subscribes `key` (id `0x<key>`) resuming `from`, its frames into a
    /// queue of `capacity`.
    async fn resume(
        &self,
        key: u64,
        from: ResumeFrom,
        capacity: usize,
    ) -> Result<(Frames, fanout::Sink), SubscribeError> {
        self.subscribe(key, Some(from), None, capacity).await
    }

    /// Subscribes `key` (id `0x<key>`) to blocks once they are `grade`
    /// final, from now.
    async fn finally(&self, key: u64, grade: Grade) -> (Frames, fanout::Sink) {
        self.subscribe(key, None, Some(grade), 64)
            .await
            .expect("subscribed")
    }

    async fn subscribe(
        &self,
        key: u64,
        resume: Option<ResumeFrom>,
        finality: Option<Grade>,
        capacity: usize,
    ) -> Result<(Frames, fanout::Sink), SubscribeError> {
        let (sink, frames) = fanout::Sink::new(capacity);
        self.handle
            .subscribe(Subscribe {
                key,
                id: format!("0x{key}").into(),
                params: "[]".into(),
                sink: sink.clone(),
                start: Start::Now,
                resume,
                finality,
                history: None,
                view: None,
            })
            .await?;
        Ok((frames, sink))
    }

    /// The cursor of head `n`, sent before.
    fn cursor(&self, n: usize) -> Cursor {
        self.cursors[&n].parse().expect("a cursor")
    }

    fn other_component(&self) -> FilterComponent {
        let mut other = self.component.clone();
        other.origin = "a replacement".into();
        other.hash = "0x02".into();
        other
    }
}

/// A failed call (a trap) loses that batch only: the next call builds a
/// fresh instance, replays every subscription into it, and delivers.
#[tokio::test]
async fn a_trap_rebuilds_the_instance_and_replays_its_subscriptions() {
    let mut h = harness().await;
    h.stand_ins.script().batches = VecDeque::from([Some("wasm trap: unreachable".into())]);
    h.send(1).await;
    h.send(2).await;
    assert_eq!(h.next().await, h.head(2), "head 1 went to the failed call");
    {
        let script = h.stand_ins.script();
        assert_eq!(script.made, 2, "rebuilt once");
        assert_eq!(
            script.subscribed,
            vec![(1, 1), (2, 1)],
            "subscription 1 replayed into it"
        );
    }
    let status = h.handle.status();
    assert_eq!((status.failures, status.disabled), (1, None));
}

/// Three failed calls in a row (here a trap, a deadline, a trap) disable
/// the component: its subscriptions end with the reason, new ones are
/// refused until a working component replaces it.
#[tokio::test]
async fn three_failures_in_a_row_disable_the_component() {
    let mut h = harness().await;
    h.stand_ins.script().batches = VecDeque::from([
        Some("wasm trap: unreachable".into()),
        Some("the call ran past its deadline of 1000 ms".into()),
        Some("wasm trap: out of bounds".into()),
    ]);
    for n in 1..=3 {
        h.send(n).await;
    }
    let ended: serde_json::Value = serde_json::from_str(&h.next().await).expect("JSON");
    let message = ended["params"]["error"]["message"]
        .as_str()
        .expect("an error");
    assert!(
        message.contains("disabled") && message.contains("3 calls in a row failed"),
        "{message}"
    );
    let refused = subscribe_all_refused(&h).await;
    assert!(matches!(refused, SubscribeError::Unavailable(m) if m.contains("disabled")));
    let status = h.handle.status();
    assert_eq!(status.failures, 3);
    assert!(
        status
            .disabled
            .is_some_and(|reason| reason.contains("out of bounds"))
    );

    // A working replacement brings the topic back.
    h.handle.swap(h.other_component()).await.expect("swapped");
    assert_eq!(h.handle.status().disabled, None);
}

async fn subscribe_all_refused(h: &Harness) -> SubscribeError {
    let (sink, _frames) = fanout::Sink::new(8);
    h.handle
        .subscribe(to_everything(2, sink))
        .await
        .expect_err("refused")
}

/// Only failures in a row count: one success between them starts over.
#[tokio::test]
async fn a_success_between_failures_starts_the_count_over() {
    let mut h = harness().await;
    let trap = || Some("wasm trap: unreachable".to_string());
    h.stand_ins.script().batches = VecDeque::from([trap(), trap(), None, trap(), trap()]);
    for n in 1..=6 {
        h.send(n).await;
    }
    assert_eq!(h.next().await, h.head(3));
    assert_eq!(h.next().await, h.head(6));
    let status = h.handle.status();
    assert_eq!((status.failures, status.disabled), (4, None));
}

/// A swap replays every live subscription into the new component; if it
/// refuses one, the swap is refused and the old component keeps serving.
#[tokio::test]
async fn a_swap_replays_or_is_refused_and_the_old_component_serves_on() {
    let mut h = harness().await;
    h.stand_ins.script().refuse = Some("no such filter field".into());
    let refused = h
        .handle
        .swap(h.other_component())
        .await
        .expect_err("refused");
    assert!(
        refused.contains("refuses live subscription 0x1"),
        "{refused}"
    );
    h.stand_ins.script().refuse = None;
    assert_eq!(h.handle.status().origin, h.component.origin);
    h.send(1).await;
    assert_eq!(h.next().await, h.head(1), "the old instance serves on");

    h.handle.swap(h.other_component()).await.expect("swapped");
    {
        let script = h.stand_ins.script();
        assert_eq!(script.made, 3, "the refused one, then the new one");
        assert_eq!(script.subscribed, vec![(1, 1), (3, 1)], "replayed");
    }
    assert_eq!(h.handle.status().origin, "a replacement");
    h.send(2).await;
    assert_eq!(h.next().await, h.head(2), "the new instance serves");

    // A component of another stream is refused before the actor.
    let mut logs = h.other_component();
    logs.manifest.source = Source::Logs;
    assert!(h.handle.swap(logs).await.is_err());
}

/// Reads `count` frames off `frames`, each within the timeout.
async fn take(frames: &mut Frames, count: usize) -> Vec<String> {
    let mut taken = Vec::with_capacity(count);
    while taken.len() < count {
        let frame = tokio::time::timeout(Duration::from_secs(30), frames.recv())
            .await
            .expect("a frame in time")
            .expect("the sink is open");
        taken.push(frame.to_text());
    }
    taken
}

/// A resuming subscription gets every head after its cursor from the log
/// (including ones the actor never saw, as without subscribers the
/// pipeline skips it), then the live ones: heads sent while it replays
/// are neither lost nor doubled at the seam.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_replays_the_log_then_joins_live_with_no_gap_or_duplicate() {
    let mut h = harness().await;
    for n in 0..4 {
        h.log_only(n);
    }
    let (mut frames, _sink) = h
        .resume(2, ResumeFrom::After(h.cursor(1)), 64)
        .await
        .expect("resumed");
    for n in 4..8 {
        h.send(n).await;
    }
    let want: Vec<String> = (2..8).map(|n| h.head_to("0x2", n)).collect();
    assert_eq!(take(&mut frames, 6).await, want);
    h.send(8).await;
    assert_eq!(take(&mut frames, 1).await, vec![h.head_to("0x2", 8)]);
    assert!(frames.try_recv().is_none(), "nothing twice");
    // The subscriber that never left got the live ones only, once each.
    let live: Vec<String> = (4..=8).map(|n| h.head(n)).collect();
    assert_eq!(take(&mut h.frames, 5).await, live);
}

/// A subscription waiting for finality is told of each canonical block
/// once the grade reaches it, in chain order, with the cursor of the step
/// that added it, and never of a block a reorg replaced or of the removal;
/// it sleeps until the grade moves, and never joins the live batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_subscription_hears_only_final_canonical_blocks() {
    let mut h = harness().await;
    h.log_only(0);
    h.log.raise_finality(Grade::Finalized, 0);
    let (mut frames, _sink) = h.finally(2, Grade::Finalized).await;
    h.send(1).await;
    h.send(2).await;
    // Block 3 of another branch, replaced by the canonical 3.
    let orphan = Arc::new(Block::fixture(3, 9, h.heads[2].hash, &[]));
    h.log.append(ChainEvent::Added(orphan.clone()));
    h.log.append(ChainEvent::Removed(orphan));
    for n in 3..6 {
        h.send(n).await;
    }
    let live: Vec<String> = (1..6).map(|n| h.head(n)).collect();
    assert_eq!(take(&mut h.frames, 5).await, live, "the live subscriber");
    assert!(frames.try_recv().is_none(), "nothing is final yet");
    assert!(h.log.raise_finality(Grade::Finalized, 3));
    let want: Vec<String> = (1..=3).map(|n| h.head_to("0x2", n)).collect();
    assert_eq!(take(&mut frames, 3).await, want);
    // Safe alone is not enough for a finalized subscription.
    h.log.raise_finality(Grade::Safe, 5);
    h.send(6).await;
    take(&mut h.frames, 1).await;
    assert!(frames.try_recv().is_none(), "{:?}", frames.try_recv());
    h.log.raise_finality(Grade::Finalized, 4);
    assert_eq!(take(&mut frames, 1).await, vec![h.head_to("0x2", 4)]);
    // A safe subscription made now starts after the safe block.
    let (mut safe, _sink) = h.finally(3, Grade::Safe).await;
    h.log.raise_finality(Grade::Safe, 6);
    assert_eq!(take(&mut safe, 1).await, vec![h.head_to("0x3", 6)]);
}

/// `fromBlock` starts at the block's own step; a block past the tip, or
/// older than the window, is refused with a message naming the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_block_replays_from_that_block_and_refusals_name_the_window() {
    let mut h = harness_with(4).await;
    for n in 0..8 {
        h.log_only(n);
    }
    let (mut frames, _sink) = h
        .resume(2, ResumeFrom::Block(6), 64)
        .await
        .expect("resumed");
    assert_eq!(
        take(&mut frames, 2).await,
        vec![h.head_to("0x2", 6), h.head_to("0x2", 7)]
    );
    let too_old = h
        .resume(3, ResumeFrom::After(h.cursor(1)), 64)
        .await
        .expect_err("too old");
    assert!(
        matches!(&too_old, SubscribeError::Resume(ResumeError::TooOld(m)) if m.contains("reaches back to block 4")),
        "{too_old:?}"
    );
    let ahead = h
        .resume(4, ResumeFrom::Block(9), 64)
        .await
        .expect_err("ahead");
    assert!(matches!(
        ahead,
        SubscribeError::Resume(ResumeError::Ahead(_))
    ));
    assert_eq!(h.handle.subscriber_count(), 2, "refused ones are not kept");
}

/// `fromBlock` tells of the chain as it is canonical when the
/// subscription is made: a block a reorg had already replaced is passed
/// over (its removal too), while a reorg after that comes as it comes to
/// live subscribers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_block_tells_of_the_chain_as_it_is_canonical_when_made() {
    let mut h = harness().await;
    for n in 0..3 {
        h.log_only(n);
    }
    // Block 3 of another branch, replaced by the canonical 3.
    let orphan = Arc::new(Block::fixture(3, 9, h.heads[2].hash, &[]));
    h.log.append(ChainEvent::Added(orphan.clone()));
    h.log.append(ChainEvent::Removed(orphan.clone()));
    for n in 3..5 {
        h.log_only(n);
    }
    // Told of 1 to 4: not of the orphan.
    let (mut frames, _sink) = h
        .resume(2, ResumeFrom::Block(1), 64)
        .await
        .expect("resumed");
    let want: Vec<String> = (1..5).map(|n| h.head_to("0x2", n)).collect();
    assert_eq!(take(&mut frames, 4).await, want);
    // A block of another branch logged after it was made is told of, as
    // to live subscribers.
    let later = Arc::new(Block::fixture(5, 9, h.heads[4].hash, &[]));
    let step = h.log.append(ChainEvent::Added(later.clone()));
    let batch = EventBatch::stream_of(&step, h.log.chain(), Source::Heads).expect("a head");
    let cursor = batch.cursor(0).expect("logged").to_string();
    assert!(h.handle.send_batch(Arc::new(batch)).await);
    let told = Frame::Notification {
        subscription: "0x2".into(),
        notice: Notice::new(&format!("\"{}\"", later.hash), Some(&cursor)),
    };
    assert_eq!(take(&mut frames, 1).await, vec![told.to_text()]);
    assert!(frames.try_recv().is_none(), "each once");
}

/// A `fromBlock` replay whose last logged steps are passed over (a batch
/// of pending transactions after the newest block) joins the live batches
/// after them, not a step past the log's head it would take for lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_from_block_replay_ending_in_passed_over_steps_goes_live() {
    let mut h = harness().await;
    for n in 0..4 {
        h.log_only(n);
    }
    h.log.append(ChainEvent::Pending(Vec::new()));
    let (mut frames, _sink) = h
        .resume(2, ResumeFrom::Block(1), 64)
        .await
        .expect("resumed");
    let want: Vec<String> = (1..4).map(|n| h.head_to("0x2", n)).collect();
    assert_eq!(take(&mut frames, 3).await, want);
    h.send(4).await;
    assert_eq!(take(&mut frames, 1).await, vec![h.head_to("0x2", 4)]);
}

/// A replay far larger than the connection's queue is paced by its
/// reader: everything arrives in order and the connection never closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_larger_than_the_queue_is_paced_not_closed() {
    let mut h = harness().await;
    for n in 0..32 {
        h.log_only(n);
    }
    let (mut frames, sink) = h.resume(2, ResumeFrom::Block(0), 4).await.expect("resumed");
    let want: Vec<String> = (0..32).map(|n| h.head_to("0x2", n)).collect();
    assert_eq!(take(&mut frames, 32).await, want);
    assert!(!sink.closing().is_closed(), "never overflowed");
}

/// A reader so slow that the log drops the step its replay needs next
/// gets an error notification saying so, not a silent gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_falls_out_of_the_window_ends_with_an_error() {
    let mut h = harness_with(4).await;
    for n in 0..4 {
        h.log_only(n);
    }
    // Room for two frames; unread, the replay stops after them.
    let (mut frames, _sink) = h.resume(2, ResumeFrom::Block(0), 2).await.expect("resumed");
    let first = take(&mut frames, 1).await;
    assert_eq!(first, vec![h.head_to("0x2", 0)]);
    for n in 4..12 {
        h.log_only(n);
    }
    // Whatever the replay queued before the log let go of the rest (head
    // 1, or heads 1 and 2: it runs on its own thread) comes in order, then
    // the error; it never skips ahead to what the window still holds.
    let mut next = 1;
    let ended = loop {
        let frame = take(&mut frames, 1).await.remove(0);
        if frame.contains("\"error\"") {
            break frame;
        }
        assert_eq!(frame, h.head_to("0x2", next));
        next += 1;
    };
    assert!(next <= 3, "heads up to {next} came, past the queue's room");
    let ended: serde_json::Value = serde_json::from_str(&ended).expect("JSON");
    assert_eq!(ended["params"]["error"]["code"], -32001);
    let message = ended["params"]["error"]["message"]
        .as_str()
        .expect("a message");
    // Where the log reaches back to depends on when the replay's thread
    // found its step gone: after head 7 at the earliest (the window of 4
    // then starts at 4), after head 11 at the latest (at 8).
    let reaches_back: u64 = message
        .split("reaches back to block ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|block| block.parse().ok())
        .unwrap_or_else(|| panic!("no window start in {message}"));
    assert!(
        message.contains("fell behind") && (4..=8).contains(&reaches_back),
        "{message}"
    );
    assert_eq!(h.handle.subscriber_count(), 1);
}

/// An actor writes a batch's notifications to an idle writer's socket
/// itself only while no other batch waits for it; one behind leaves them
/// to the connection's writer, queued.
#[tokio::test]
async fn an_actor_behind_its_batches_queues_instead_of_writing() {
    let mut h = harness().await;
    let pipe = Pipe::with_room(1 << 20);
    let (sink, mut frames) = fanout::Sink::wired(8, pipe.wire(), None);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let waiting = frames.poll_take(&mut cx, &mut VecDeque::new(), &mut Vec::new(), 8);
    assert!(
        waiting.is_pending(),
        "the writer waits with nothing in flight"
    );
    h.handle
        .subscribe(to_everything(2, sink))
        .await
        .expect("subscribed");
    let (began, call_began) = oneshot::channel();
    let (go_on, held) = std::sync::mpsc::channel();
    h.stand_ins.script().hold = Some((began, held));
    h.send(1).await;
    tokio::time::timeout(Duration::from_secs(30), call_began)
        .await
        .expect("the call began in time")
        .expect("began");
    h.send(2).await;
    h.send(3).await;
    go_on.send(()).expect("the call waits");
    // Acknowledged once the batches before it are delivered.
    h.handle.unsubscribe(99).await;

    let mut written = Vec::new();
    h.head_frame("0x2", 1).encode(&mut written);
    assert_eq!(pipe.taken(), written, "head 1 written: nothing waited");
    assert_eq!(
        frames.try_recv(),
        Some(h.head_frame("0x2", 2)),
        "queued behind"
    );
    assert_eq!(frames.try_recv(), Some(h.head_frame("0x2", 3)));
    assert_eq!(frames.try_recv(), None);
}
