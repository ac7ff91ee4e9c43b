//! The devnet's task: [`run`] drives a [`Devnet`] in real time, builds
//! blocks and signs its own pending batches on the blocking pool,
//! announces submissions (together when they come close), mines the next
//! block at once when asked (`evm_mine`), and drops a pending transaction
//! when asked (`anvil_dropTransaction`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use alloy_primitives::B256;

use super::mempool::{DropRefused, Submission};
use super::{Accounts, Devnet, Done, FinalityDepths, Step};
use chainsieve_model::{SourceEvent, Transaction};

/// Submissions taken into one pending announcement at most.
const SUBMISSIONS_PER_BATCH: usize = 1_024;

/// The least time between two announcements of submissions: what comes
/// sooner waits for the mark with whatever else arrives by then, as a
/// node's pool announces in batches. Every announcement is a write to
/// every pending subscriber's socket, and the kernel's cost is per write
/// (docs/src/benchmarks.md, The devnet's announcements); a quiet devnet
/// still announces a submission at once.
const ANNOUNCE_GAP: Duration = Duration::from_millis(30);

/// What is asked of the devnet besides submissions.
#[derive(Debug)]
pub enum DevnetRequest {
    /// Mine the next block now (`evm_mine`), answered once the block has
    /// been sent on.
    Mine(oneshot::Sender<()>),
    /// Drop pending transaction `hash` (`anvil_dropTransaction`), answered
    /// with the hashes dropped once their drop has been sent on.
    Drop { hash: B256, reply: DropAnswer },
}

/// Where a drop's outcome goes: the hashes dropped, or why none was.
pub type DropAnswer = oneshot::Sender<Result<Vec<B256>, DropRefused>>;

/// Drives `devnet` in real time until `shutdown` is cancelled or the
/// receiver is gone: genesis first, then one step per
/// `block_time / (pending_batches_per_block + 1)`, so a block's pending
/// batches and the block itself share the block time evenly. Submitted
/// transactions are answered as they are accepted, and announced at once
/// unless an announcement went less than [`ANNOUNCE_GAP`] before: then
/// together with what else arrives by its mark, and always before the
/// block that mines them. A request on `mines` runs the steps up to the
/// next block back to back, without waiting for ticks (a test, or a
/// client's, way to step the chain block by block: with a long block time,
/// only requested blocks come).
pub async fn run(
    mut devnet: Devnet,
    out: mpsc::Sender<SourceEvent>,
    mut submissions: mpsc::Receiver<Submission>,
    mut mines: mpsc::Receiver<DevnetRequest>,
    shutdown: CancellationToken,
) {
    let ledger = devnet.ledger();
    let sink = Sink {
        out: &out,
        shutdown: &shutdown,
        ledger: &ledger,
        finality: devnet.finality_depths(),
    };
    if !sink.send(SourceEvent::Block(devnet.genesis())).await {
        return;
    }
    // The generated past, back to back.
    let mut history = devnet.settings.history_blocks;
    while history > 0 {
        for event in devnet.next_step() {
            if matches!(event, SourceEvent::Block(_)) {
                history = history.saturating_sub(1);
            }
            if !sink.send(event).await {
                return;
            }
        }
    }
    // What follows is live.
    devnet.go_live();
    if !sink.send(SourceEvent::Synced).await {
        return;
    }
    let steps = devnet.settings.pending_batches_per_block.max(1) + 1;
    let mut ticks =
        tokio::time::interval((devnet.block_time() / steps).max(Duration::from_millis(1)));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // The first tick completes at once; the first batch comes one period
    // after genesis.
    ticks.tick().await;
    let mut arrived = Vec::new();
    let mut open = true;
    // A tick's work on the blocking pool; ticks wait for it.
    let mut working: Option<JoinHandle<Done>> = None;
    // Requests to mine, oldest first: each is answered by a block of its
    // own.
    let mut mining: Vec<oneshot::Sender<()>> = Vec::new();
    // Requests to drop, oldest first: taken only while no job runs, as a
    // job's place in the pool must not move under it.
    let mut dropping: Vec<(B256, DropAnswer)> = Vec::new();
    let mut mines_open = true;
    // Submissions accepted and waiting for the gap's mark; when the last
    // announcement went.
    let mut held = Vec::new();
    let mut last_announced: Option<tokio::time::Instant> = None;
    loop {
        let mark = last_announced.map(|at| at + ANNOUNCE_GAP);
        let events = tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            // Held submissions, once the gap since the last announcement
            // has passed (at once if it has).
            () = tokio::time::sleep_until(mark.unwrap_or_else(tokio::time::Instant::now)), if !held.is_empty() => {
                if !announce(&sink, &mut held).await {
                    return;
                }
                last_announced = Some(tokio::time::Instant::now());
                continue;
            }
            done = async { working.as_mut().expect("guarded").await }, if working.is_some() => {
                working = None;
                match done {
                    Ok(done) => devnet.finish(done),
                    Err(error) => {
                        tracing::error!(chain_id = devnet.chain_id, %error, "building a devnet block or signing its batch failed; the devnet stops");
                        return;
                    }
                }
            }
            // Asked to drop, between jobs.
            () = std::future::ready(()), if working.is_none() && !dropping.is_empty() => {
                // What was announced goes first: a transaction is pending
                // before it is dropped.
                if !announce(&sink, &mut held).await {
                    return;
                }
                for (hash, reply) in dropping.drain(..) {
                    let dropped = devnet.drop_pending(hash);
                    if let Ok(hashes) = &dropped
                        && !sink.send(SourceEvent::Dropped(hashes.clone())).await
                    {
                        return;
                    }
                    let _ = reply.send(dropped);
                }
                continue;
            }
            // Asked to mine: the block's steps back to back.
            () = std::future::ready(()), if working.is_none() && !mining.is_empty() => {
                match begin(&mut devnet, &mut working) {
                    Some(events) => events,
                    None => continue,
                }
            }
            _ = ticks.tick(), if working.is_none() => match begin(&mut devnet, &mut working) {
                Some(events) => events,
                None => continue,
            },
            request = mines.recv(), if mines_open => {
                match request {
                    Some(DevnetRequest::Mine(request)) => mining.push(request),
                    Some(DevnetRequest::Drop { hash, reply }) => dropping.push((hash, reply)),
                    // Closed: the chain is no longer asked to mine.
                    None => mines_open = false,
                }
                continue;
            }
            received = submissions.recv_many(&mut arrived, SUBMISSIONS_PER_BATCH), if open => {
                // Closed: the chain no longer takes submissions.
                open = received > 0;
                let accepted_from = held.len();
                let outcomes: Vec<_> = arrived
                    .drain(..)
                    .map(|submission| {
                        let outcome = devnet
                            .accept(submission.envelope, submission.from)
                            .map(|tx| held.push(tx));
                        (submission.reply, outcome)
                    })
                    .collect();
                // Their senders' pending nonces count them from now, as a
                // node's pool does, announced or not yet; the mark's arm
                // above announces them (at once when no mark is ahead).
                ledger.pending(&held[accepted_from..]);
                for (reply, outcome) in outcomes {
                    let _ = reply.send(outcome);
                }
                continue;
            }
        };
        let mined = events.iter().any(|e| matches!(e, SourceEvent::Block(_)));
        // What waits for the mark goes first: pending before mined.
        if !announce(&sink, &mut held).await {
            return;
        }
        for event in events {
            if !sink.send(event).await {
                return;
            }
        }
        if mined && !mining.is_empty() {
            // Whoever asked may have given up waiting.
            let _ = mining.remove(0).send(());
        }
    }
}

/// Announces the `held` submissions, if any; false when the devnet should
/// stop.
async fn announce(sink: &Sink<'_>, held: &mut Vec<Arc<Transaction>>) -> bool {
    held.is_empty()
        || sink
            .send(SourceEvent::Pending {
                txs: std::mem::take(held),
                seen_by: None,
            })
            .await
}

/// Takes `devnet`'s next step: its events if they are ready, or `None`
/// with its work started on the blocking pool (`working`).
fn begin(devnet: &mut Devnet, working: &mut Option<JoinHandle<Done>>) -> Option<Vec<SourceEvent>> {
    match devnet.step() {
        Step::Announce(events) => Some(events),
        Step::Work(job) => {
            *working = Some(tokio::task::spawn_blocking(move || job.run()));
            None
        }
    }
}

/// Where the devnet's events go.
struct Sink<'a> {
    out: &'a mpsc::Sender<SourceEvent>,
    shutdown: &'a CancellationToken,
    ledger: &'a Accounts,
    finality: FinalityDepths,
}

impl Sink<'_> {
    /// Sends `event` unless shutdown comes first (a full channel must not
    /// keep the devnet alive); false when the devnet should stop. The
    /// ledger notes the nonces of what is announced first, so a sender
    /// that reads its pending nonce once its transaction is announced sees
    /// it counted (the devnet's own; a submission was counted when
    /// accepted, and counting it again changes nothing). A block is followed by the finality it brings.
    async fn send(&self, event: SourceEvent) -> bool {
        if let SourceEvent::Pending { txs, .. } = &event {
            self.ledger.pending(txs);
        }
        let finality = match &event {
            SourceEvent::Block(block) => Some(self.finality.at(block.number())),
            _ => None,
        };
        for event in std::iter::once(event).chain(finality) {
            let sent = tokio::select! {
                biased;
                () = self.shutdown.cancelled() => false,
                sent = self.out.send(event) => sent.is_ok(),
            };
            if !sent {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use tokio::sync::oneshot;

    use super::super::testing::{outside, quiet, settings};
    use super::super::{DevnetSettings, SubmissionRefused};
    use super::*;

    /// The next event [`run`] sends; `why` it should come in time.
    async fn next_event(events: &mut mpsc::Receiver<SourceEvent>, why: &str) -> SourceEvent {
        tokio::time::timeout(Duration::from_secs(30), events.recv())
            .await
            .expect(why)
            .expect("the devnet runs")
    }

    /// A submissions queue nobody sends to.
    fn closed() -> mpsc::Receiver<Submission> {
        mpsc::channel(1).1
    }

    /// Mine requests nobody sends.
    fn no_mines() -> mpsc::Receiver<DevnetRequest> {
        mpsc::channel(1).1
    }

    /// With an hour between blocks, each request mines a block of its own
    /// at once, after the block's pending batches, and is answered once the
    /// block is sent on.
    #[tokio::test]
    async fn each_mine_request_mines_the_next_block_at_once() {
        let hourly = DevnetSettings {
            block_time_ms: Some(3_600_000),
            history_blocks: 0,
            ..settings()
        };
        let (out, mut events) = mpsc::channel(64);
        let (mine, mines) = mpsc::channel(4);
        let shutdown = CancellationToken::new();
        tokio::spawn(run(
            Devnet::new(1, &hourly),
            out,
            closed(),
            mines,
            shutdown.clone(),
        ));
        let mut answers = Vec::new();
        for _ in 0..2 {
            let (request, answer) = oneshot::channel();
            mine.send(DevnetRequest::Mine(request))
                .await
                .expect("the devnet runs");
            answers.push(answer);
        }
        let mut blocks = Vec::new();
        let mut pending_before_block = 0;
        while blocks.len() < 3 {
            match next_event(&mut events, "a requested block comes at once").await {
                SourceEvent::Block(block) => blocks.push(block.number()),
                SourceEvent::Pending { .. } if blocks.len() == 2 => pending_before_block += 1,
                _ => {}
            }
        }
        // Genesis, then one block per request.
        assert_eq!(blocks, [0, 1, 2]);
        assert!(
            pending_before_block > 0,
            "the second block's batches came first"
        );
        for answer in answers {
            tokio::time::timeout(Duration::from_secs(30), answer)
                .await
                .expect("answered in time")
                .expect("answered once mined");
        }
        shutdown.cancel();
    }

    /// Submissions are announced as they arrive, without waiting for a
    /// tick, and every sender hears back, refused or not.
    #[tokio::test]
    async fn run_announces_submissions_at_once() {
        let slow = DevnetSettings {
            block_time_ms: Some(3_600_000),
            history_blocks: 0,
            ..quiet()
        };
        let (out, mut events) = mpsc::channel(16);
        let (submit, submitted) = mpsc::channel(16);
        let shutdown = CancellationToken::new();
        tokio::spawn(run(
            Devnet::new(1, &slow),
            out,
            submitted,
            no_mines(),
            shutdown.clone(),
        ));
        let mut answers = Vec::new();
        for nonce in [0, 1, 1] {
            answers.push(send_transfer(&submit, nonce).await.0);
        }
        let mut announced = Vec::new();
        while announced.len() < 2 {
            let event = next_event(&mut events, "announced without waiting for a block").await;
            if let SourceEvent::Pending { txs, .. } = event {
                announced.extend(txs.iter().map(|tx| tx.nonce));
            }
        }
        assert_eq!(announced, [0, 1]);
        let mut outcomes = Vec::new();
        for answer in answers {
            outcomes.push(answer.await.expect("answered"));
        }
        assert_eq!(
            outcomes,
            [Ok(()), Ok(()), Err(SubmissionRefused::AlreadyKnown)]
        );
        shutdown.cancel();
    }

    /// Submits a transfer from the outside sender with `nonce`; returns
    /// where its answer comes and the sender.
    async fn send_transfer(
        submit: &mpsc::Sender<Submission>,
        nonce: u64,
    ) -> (
        oneshot::Receiver<Result<(), SubmissionRefused>>,
        alloy_primitives::Address,
    ) {
        let (envelope, from) = outside(nonce, 21_000, &[]);
        let (reply, answer) = oneshot::channel();
        submit
            .send(Submission {
                envelope,
                from,
                reply,
            })
            .await
            .expect("the devnet runs");
        (answer, from)
    }

    /// The nonces of the next pending announcement (nothing else comes
    /// with an hour per block).
    async fn pending(events: &mut mpsc::Receiver<SourceEvent>) -> Vec<u64> {
        match next_event(events, "announced").await {
            SourceEvent::Pending { txs, .. } => txs.iter().map(|tx| tx.nonce).collect(),
            other => panic!("a pending announcement, not {other:?}"),
        }
    }

    /// A submission within [`ANNOUNCE_GAP`] of the last announcement waits
    /// for the gap's mark, with whatever else arrives by then, while its
    /// sender is answered and its pending nonce counted at once; once the
    /// devnet is quiet again, a submission is announced at once.
    #[tokio::test(start_paused = true)]
    async fn submissions_close_together_are_announced_together_at_the_gap() {
        let slow = DevnetSettings {
            block_time_ms: Some(3_600_000),
            history_blocks: 0,
            ..quiet()
        };
        let devnet = Devnet::new(1, &slow);
        let ledger = devnet.ledger();
        let (out, mut events) = mpsc::channel(16);
        let (submit, submitted) = mpsc::channel(16);
        let shutdown = CancellationToken::new();
        tokio::spawn(run(devnet, out, submitted, no_mines(), shutdown.clone()));
        let send = |nonce| {
            let submit = submit.clone();
            async move {
                let (answer, from) = send_transfer(&submit, nonce).await;
                answer.await.expect("answered").expect("accepted");
                from
            }
        };
        while !matches!(
            next_event(&mut events, "genesis, then live").await,
            SourceEvent::Synced
        ) {}

        let first = tokio::time::Instant::now();
        let from = send(0).await;
        assert_eq!(pending(&mut events).await, [0], "the first at once");
        assert_eq!(tokio::time::Instant::now(), first);

        tokio::time::advance(Duration::from_millis(1)).await;
        send(1).await;
        send(2).await;
        assert_eq!(ledger.nonce(from, true), 3, "counted when accepted");
        assert!(events.try_recv().is_err(), "held for the mark");
        assert_eq!(pending(&mut events).await, [1, 2], "together");
        assert_eq!(tokio::time::Instant::now(), first + ANNOUNCE_GAP);

        tokio::time::advance(ANNOUNCE_GAP * 5).await;
        let quiet = tokio::time::Instant::now();
        send(3).await;
        assert_eq!(pending(&mut events).await, [3], "quiet again: at once");
        assert_eq!(tokio::time::Instant::now(), quiet);
        shutdown.cancel();
    }

    /// The generated past comes at once: with an hour per block, five
    /// blocks after genesis can only be the history.
    #[tokio::test]
    async fn run_sends_the_history_back_to_back() {
        let slow = DevnetSettings {
            block_time_ms: Some(3_600_000),
            genesis_timestamp: None,
            history_blocks: 5,
            ..settings()
        };
        let devnet = Devnet::new(1, &slow);
        let genesis_time = devnet.genesis().header.timestamp;
        let (out, mut events) = mpsc::channel(64);
        let shutdown = CancellationToken::new();
        tokio::spawn(run(devnet, out, closed(), no_mines(), shutdown.clone()));
        let mut blocks = Vec::new();
        let mut finality = Vec::new();
        loop {
            match next_event(&mut events, "history arrives at once").await {
                SourceEvent::Block(block) => blocks.push(block),
                SourceEvent::Pending { .. } | SourceEvent::Dropped(_) => {}
                SourceEvent::Synced => break,
                SourceEvent::Finality { safe, finalized } => finality.push((safe, finalized)),
                SourceEvent::Logged { .. } => panic!("the devnet logs no steps"),
            }
        }
        // Each block is followed by its finality: Ethereum's profile, no
        // final block yet six blocks in.
        assert_eq!(finality, vec![(None, None); 6]);
        assert_eq!(
            blocks.len(),
            6,
            "genesis and five history blocks, then the marker"
        );
        let last = &blocks[5];
        assert_eq!(last.number(), 5);
        assert_eq!(last.header.timestamp, genesis_time + 5 * 3_600);
        // The last history block is (about) now: genesis was set back.
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        assert!(
            last.header.timestamp.abs_diff(now) <= 60,
            "{} vs {now}",
            last.header.timestamp
        );
        shutdown.cancel();
    }

    #[tokio::test]
    async fn run_sends_genesis_then_steps_until_shutdown() {
        let fast = DevnetSettings {
            block_time_ms: Some(50),
            ..settings()
        };
        let devnet = Devnet::new(1, &fast);
        let genesis = devnet.genesis().hash;
        let (out, mut events) = mpsc::channel(16);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(devnet, out, closed(), no_mines(), shutdown.clone()));
        let SourceEvent::Block(first) = next_event(&mut events, "events keep coming").await else {
            panic!("genesis comes first");
        };
        assert_eq!(first.hash, genesis);
        let mut pending = 0;
        loop {
            match next_event(&mut events, "events keep coming").await {
                SourceEvent::Pending { .. } => pending += 1,
                SourceEvent::Block(block) => {
                    assert_eq!((block.number(), pending), (1, 4));
                    break;
                }
                SourceEvent::Finality { .. } | SourceEvent::Dropped(_) => {}
                SourceEvent::Synced | SourceEvent::Logged { .. } => {
                    panic!("the history ends after block 1")
                }
            }
        }
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("run returns on shutdown")
            .expect("run does not panic");

        // A full channel nobody reads does not keep it alive either.
        let (out, _unread) = mpsc::channel(1);
        let full = out.clone();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(
            Devnet::new(1, &fast),
            out,
            closed(),
            no_mines(),
            shutdown.clone(),
        ));
        // Blocked once the one slot is taken and it waits for another.
        tokio::time::timeout(Duration::from_secs(30), async {
            while full.capacity() > 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the devnet fills the channel");
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("run returns on shutdown while blocked")
            .expect("run does not panic");

        // Nor does a receiver that is gone.
        let (out, events) = mpsc::channel(1);
        drop(events);
        tokio::time::timeout(
            Duration::from_secs(5),
            run(
                Devnet::new(1, &fast),
                out,
                closed(),
                no_mines(),
                CancellationToken::new(),
            ),
        )
        .await
        .expect("run returns when the receiver is gone");
    }
}
