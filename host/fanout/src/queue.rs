//! A connection's outbound queue: many senders (the session's reader, every
//! filter actor with a subscription on the connection), one receiver (the
//! session's writer), a bound, and a close flag.
//!
//! A `VecDeque` under a mutex, not `tokio::sync::mpsc`: every notification
//! passes through here, and the load benchmark's profile put a third of the
//! server's user time in mpsc's block list, its semaphore and a second
//! waker for the close flag. Here a send is one uncontended lock and a
//! push (or, while the writer waits, a write to the socket under the lock);
//! the writer takes a whole round of frames under one lock, and
//! frames, close and the last sender's drop all wake the one waker the
//! writer leaves (docs/src/architecture.md, Fan-out). An idle connection's
//! queue allocates nothing.
//!
//! A queue made with its socket ([`Sink::wired`]) skips itself when it can:
//! a sender that finds the writer waiting on an empty queue writes its
//! frames to the socket under the lock, and wakes nobody unless the socket
//! took them only in part (the writer writes the rest, before anything
//! queued after them).
//!
//! A sender may also hold its frames back ([`Sink::hold_all`]): queued
//! without waking the waiting writer, until the [`Held`] it was given is
//! dropped, which writes everything held in one write. A step's topics hold
//! a connection's frames this way so that the step goes out in one write
//! ([`super::Together`]).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use tokio::sync::Notify;

use super::frame::{Frame, Notice};
use super::wire::{Wire, with_scratch};
use chainsieve_usage::Meter;
use chainsieve_usage::meter::Counted;

/// The sending side of one connection's outbound queue.
#[derive(Debug)]
pub struct Sink {
    shared: Arc<Shared>,
}

/// The receiving side: the connection's writer.
#[derive(Debug)]
pub struct Frames {
    shared: Arc<Shared>,
    /// The connection's place in its key's meter, left when the receiver
    /// goes (nothing is counted after that); `None`: not counted.
    metered: Option<Metered>,
}

/// Tells a connection's writer to stop: set by a send that found the queue
/// full, or by the session (the client left, the server shuts down).
#[derive(Clone, Debug)]
pub struct Closing {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Frames and the writer's waker, under one lock so that a frame
    /// queued while the writer parks can never miss it. A sender writing
    /// to the socket itself holds it across the write: whoever holds it
    /// decides what goes out next, so writes never interleave.
    queue: Mutex<Queue>,
    /// How far a reader may fall behind, in frames.
    capacity: usize,
    /// Set once, by an overflow or the session; read by the session
    /// without the lock, and by the writer.
    closed: AtomicBool,
    /// Live [`Sink`]s: the writer stops once none is left and the queue
    /// is empty, as no frame can come any more.
    senders: AtomicUsize,
    /// The connection's socket, for a sender to write to while the writer
    /// waits ([`Queue::idle`]); `None`: every frame goes through the queue.
    /// Shared with the socket's other owners, so no box of its own between
    /// the queue and the socket's descriptor: a sender reaches it in one
    /// pointer from the queue's lines.
    wire: Option<Arc<dyn Wire>>,
    /// Whether the notifications taken are counted ([`Queue::counts`]),
    /// for the connection's key's meter.
    counted: bool,
    /// Some sender waits for room ([`Queue::room_waiters`]): read without
    /// the lock by the writer after each round, so a queue nobody waits on
    /// pays one load for it.
    room_waited: AtomicBool,
}

/// A connection's place in its key's meter, which reads its counts.
#[derive(Debug)]
struct Metered {
    meter: Arc<Meter>,
    /// The connection's number in the meter, to detach it.
    number: u64,
}

#[derive(Debug, Default)]
struct Queue {
    frames: VecDeque<Frame>,
    /// The writer's, while it waits: taken and woken by the next frame
    /// queued (not one written to the socket), a sender's unwritten rest,
    /// a ping, the close, or the last sender's drop.
    writer: Option<Waker>,
    /// A keepalive ping is due: it goes out at the head of the next round,
    /// ahead of what is queued and outside the bound, as a reader slow to
    /// drain a long queue must still get it within the ping interval.
    ping: bool,
    /// The receiver was dropped: nothing queued would be written.
    receiver_gone: bool,
    /// The writer waits on this queue with nothing in flight, and nobody
    /// has woken it since: a sender may write to the socket itself.
    idle: bool,
    /// The rest of a sender's own write the socket took only in part: the
    /// writer writes it first, then what it takes from the queue.
    unwritten: Vec<u8>,
    /// The queued frames are held for a [`Held`] while the writer waits,
    /// not woken: nobody writes to the socket past them, and the next
    /// frame queued, a wake or the writer's own round ends the hold early.
    held: bool,
    /// Notifications taken for the connection (written or queued) and
    /// their bytes, when [`Shared::counted`]: kept here, in the lines a
    /// sender touches anyway, and read by the meter under this lock.
    counts: (u64, u64),
    /// Senders to wake once the queue is at most half full again
    /// ([`Sink::wake_when_room`]): filter actors whose replays wait for
    /// the room. Each at most once.
    room_waiters: Vec<Arc<Notify>>,
}

/// How a sender's frames may reach the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// Written by the sender itself when the writer waits on an empty
    /// queue, else queued.
    Socket,
    /// Queued for the writer: a sender with more work waiting (an actor
    /// behind its batches) leaves the writes to the writers, which share
    /// them across the worker threads and gather what queues up.
    Queue,
}

/// What a sender did with its frames.
enum Sent {
    /// Written whole to the socket: the writer is not woken.
    Written,
    /// Queued behind a hold, for its release: the writer is not woken.
    Held,
    /// Queued, or written in part: the writer is woken to go on.
    Queued,
}

/// How [`Sink::notify`] sends.
enum How<'h> {
    Via(Via),
    /// Held for the release of a [`Held`], pushed here if this hold is new.
    Hold(&'h mut Vec<Held>),
}

/// A connection whose frames are held ([`Sink::hold_all`]): dropped, it
/// writes them in one write if the writer still waits, else leaves them to
/// the writer, which something woke since.
#[derive(Debug)]
pub struct Held(Arc<Shared>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// Why a frame was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The reader fell `capacity` frames behind; the connection is closing.
    Overflow,
    /// The connection is gone.
    Closed,
}

/// What the writer's wait ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    /// Something to write: frames were taken, or the rest of a sender's
    /// write.
    Frames,
    /// The queue was closed (before any frame was taken).
    Closing,
    /// Every sender is gone and nothing is left.
    Gone,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Nothing under this lock panics (queue changes, encoding into a
        // Vec, a non-blocking write); a poisoned queue is still whole.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`Sink::room_to_spare`] of `queue`, this queue's frames.
    fn room_to_spare(&self, queue: &Queue) -> usize {
        (self.capacity / 2 + 1).saturating_sub(queue.frames.len())
    }

    /// Wakes the senders waiting for room if there is room now; called
    /// after frames left the queue.
    fn wake_room_waiters(&self) {
        if !self.room_waited.load(Ordering::Acquire) {
            return;
        }
        let waiters = {
            let mut queue = self.lock();
            if !queue.receiver_gone && self.room_to_spare(&queue) == 0 {
                return;
            }
            self.room_waited.store(false, Ordering::Release);
            std::mem::take(&mut queue.room_waiters)
        };
        for waiter in waiters {
            waiter.notify_one();
        }
    }

    /// Wakes the writer if it waits.
    fn wake_writer(&self) {
        let waker = self.lock().wake();
        wake(waker);
    }

    /// Makes `change` to the queue under its lock, unless the receiver is
    /// gone, and wakes the writer if it waits and `change` queued anything
    /// (after the lock is let go).
    fn offer(
        &self,
        change: impl FnOnce(&mut Queue) -> Result<Sent, SendError>,
    ) -> Result<(), SendError> {
        let waker = {
            let mut queue = self.lock();
            // Nothing is queued after a close: what an overflow left is a
            // gapless prefix of each subscription's notifications (a
            // webhook delivers it, then reads on from its last cursor).
            if queue.receiver_gone || self.is_closed() {
                return Err(SendError::Closed);
            }
            match change(&mut queue)? {
                Sent::Written | Sent::Held => None,
                Sent::Queued => queue.wake(),
            }
        };
        wake(waker);
        Ok(())
    }

    /// Writes what `encode` makes straight to the socket, if the writer
    /// waits with nothing in flight and the queue is open; `None` when it
    /// wrote nothing (the caller queues the frames instead).
    fn write_through(&self, queue: &mut Queue, encode: impl FnOnce(&mut Vec<u8>)) -> Option<Sent> {
        if !queue.idle || queue.held || self.is_closed() {
            return None;
        }
        self.write_now(&mut queue.unwritten, encode)
    }

    /// Writes what `encode` makes to the socket, keeping in `unwritten`
    /// what it took only in part (`Queued`: the writer must be woken);
    /// `None` when it wrote nothing.
    fn write_now(
        &self,
        unwritten: &mut Vec<u8>,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Option<Sent> {
        let wire = self.wire.as_ref()?;
        with_scratch(|scratch| {
            encode(scratch);
            // A failed socket is left to the writer, which stops on it.
            match wire.try_write(scratch) {
                Ok(sent) if sent == scratch.len() => Some(Sent::Written),
                Ok(sent) if sent > 0 => {
                    unwritten.extend_from_slice(&scratch[sent..]);
                    Some(Sent::Queued)
                }
                _ => None,
            }
        })
    }

    /// Ends a hold: writes the held frames in one write while the writer
    /// still waits, else wakes it to write them.
    fn release(&self) {
        let (waker, written) = {
            let mut queue = self.lock();
            if !std::mem::take(&mut queue.held) {
                // Something woke the writer since: it writes them.
                return;
            }
            let sent = if self.is_closed() || queue.receiver_gone {
                None
            } else {
                let Queue {
                    frames, unwritten, ..
                } = &mut *queue;
                self.write_now(unwritten, |out| {
                    for frame in frames.iter() {
                        frame.encode(out);
                    }
                })
            };
            let written = match sent {
                Some(_) => std::mem::take(&mut queue.frames),
                None => VecDeque::new(),
            };
            let waker = match sent {
                Some(Sent::Written) => None,
                _ => queue.wake(),
            };
            (waker, written)
        };
        // Dropped outside the lock: the last reference to a notice frees it.
        drop(written);
        wake(waker);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

impl Queue {
    /// Takes the writer's waker to wake it: it is no longer idle, and
    /// writes what was held.
    fn wake(&mut self) -> Option<Waker> {
        self.idle = false;
        self.held = false;
        self.writer.take()
    }

    /// `Ok` if `count` more frames fit in `capacity`.
    fn make_room(&self, count: usize, capacity: usize) -> Result<(), SendError> {
        if self.frames.len() + count > capacity {
            return Err(SendError::Overflow);
        }
        Ok(())
    }
}

impl Sink {
    /// A queue of `capacity` frames, all of them passed to its writer.
    pub fn new(capacity: usize) -> (Self, Frames) {
        Self::with_wire(capacity, None, None)
    }

    /// A queue of `capacity` frames for `wire`, which its senders write to
    /// themselves while the writer waits on an empty queue; the
    /// notifications it takes are counted by `meter`.
    pub fn wired(
        capacity: usize,
        wire: Arc<dyn Wire>,
        meter: Option<Arc<Meter>>,
    ) -> (Self, Frames) {
        Self::with_wire(capacity, Some(wire), meter)
    }

    fn with_wire(
        capacity: usize,
        wire: Option<Arc<dyn Wire>>,
        meter: Option<Arc<Meter>>,
    ) -> (Self, Frames) {
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            capacity: capacity.max(1),
            closed: AtomicBool::new(false),
            senders: AtomicUsize::new(1),
            wire,
            counted: meter.is_some(),
            room_waited: AtomicBool::new(false),
        });
        let metered = meter.map(|meter| Metered {
            number: meter.attach(shared.clone()),
            meter,
        });
        (
            Self {
                shared: shared.clone(),
            },
            Frames { shared, metered },
        )
    }

    /// Sends a frame without waiting: written to the socket at once when
    /// the writer waits on an empty queue, else queued.
    pub fn send(&self, frame: impl Into<Frame>) -> Result<(), SendError> {
        let frame = frame.into();
        self.push(|queue| {
            if let Some(sent) = self.shared.write_through(queue, |out| frame.encode(out)) {
                return Ok(sent);
            }
            queue.make_room(1, self.shared.capacity)?;
            queue.frames.push_back(frame);
            Ok(Sent::Queued)
        })
    }

    /// Sends an `eth_subscription` notification of each of `notices` to
    /// `subscription`, back to back: in one write, by [`Via::Socket`],
    /// when the writer waits on an empty queue. All or none are queued: a
    /// queue without room for all of them overflows. `Ok`: how many were
    /// sent.
    pub fn notify_all<'a>(
        &self,
        subscription: &Arc<str>,
        notices: impl Iterator<Item = &'a Notice> + Clone,
        via: Via,
    ) -> Result<usize, SendError> {
        self.notify(subscription, notices, How::Via(via))
    }

    /// Sends an `eth_subscription` notification of each of `notices` to
    /// `subscription` as [`Self::notify_all`] does, but while the writer
    /// waits holds them instead of writing: they go out, with whatever else
    /// is held, when the [`Held`] pushed to `held` is dropped (one per hold:
    /// none is pushed when this queue is held already, or its writer is
    /// busy and simply takes them). `Ok`: how many were queued.
    pub fn hold_all<'a>(
        &self,
        subscription: &Arc<str>,
        notices: impl Iterator<Item = &'a Notice> + Clone,
        held: &mut Vec<Held>,
    ) -> Result<usize, SendError> {
        self.notify(subscription, notices, How::Hold(held))
    }

    fn notify<'a>(
        &self,
        subscription: &Arc<str>,
        notices: impl Iterator<Item = &'a Notice> + Clone,
        how: How<'_>,
    ) -> Result<usize, SendError> {
        let count = notices.clone().count();
        let count_them = |queue: &mut Queue| {
            if self.shared.counted {
                let bytes: usize = notices
                    .clone()
                    .map(|notice| notice.len_to(subscription))
                    .sum();
                queue.counts.0 += count as u64;
                queue.counts.1 += bytes as u64;
            }
        };
        let mut newly_held = false;
        self.push(|queue| {
            let encode = |out: &mut Vec<u8>| {
                for notice in notices.clone() {
                    notice.encode_to(subscription, out);
                }
            };
            if matches!(how, How::Via(Via::Socket))
                && let Some(sent) = self.shared.write_through(queue, encode)
            {
                count_them(queue);
                return Ok(sent);
            }
            queue.make_room(count, self.shared.capacity)?;
            queue
                .frames
                .extend(notices.clone().map(|notice| Frame::Notification {
                    subscription: subscription.clone(),
                    notice: notice.clone(),
                }));
            count_them(queue);
            if matches!(how, How::Hold(_)) && queue.idle {
                newly_held = !std::mem::replace(&mut queue.held, true);
                return Ok(Sent::Held);
            }
            Ok(Sent::Queued)
        })?;
        if let (How::Hold(held), true) = (how, newly_held) {
            held.push(Held(self.shared.clone()));
        }
        Ok(count)
    }

    /// Offers `change`; an overflow closes the connection.
    fn push(
        &self,
        change: impl FnOnce(&mut Queue) -> Result<Sent, SendError>,
    ) -> Result<(), SendError> {
        let pushed = self.shared.offer(change);
        if pushed == Err(SendError::Overflow) {
            self.closing().close();
        }
        pushed
    }

    /// Asks for a keepalive ping ahead of the queued frames (one, however
    /// often asked before the writer takes it); it never overflows.
    pub fn ping(&self) -> Result<(), SendError> {
        self.shared.offer(|queue| {
            queue.ping = true;
            Ok(Sent::Queued)
        })
    }

    /// How many frames may be queued one after another, each while the
    /// queue is at most half full: a replay fills only that half, so live
    /// frames always find room (docs/src/architecture.md, The event log).
    pub fn room_to_spare(&self) -> usize {
        self.shared.room_to_spare(&self.shared.lock())
    }

    /// Has `wakeup` notified once [`Self::room_to_spare`] is above zero:
    /// at once if it is, else when the writer has taken frames (or the
    /// receiver is gone). Checked and registered under the queue's lock,
    /// so a round of the writer in between is never missed.
    pub fn wake_when_room(&self, wakeup: &Arc<Notify>) {
        let mut queue = self.shared.lock();
        if queue.receiver_gone || self.shared.room_to_spare(&queue) > 0 {
            drop(queue);
            wakeup.notify_one();
            return;
        }
        if !queue.room_waiters.iter().any(|w| Arc::ptr_eq(w, wakeup)) {
            queue.room_waiters.push(wakeup.clone());
        }
        self.shared.room_waited.store(true, Ordering::Release);
    }

    /// Set when a frame was dropped for lack of room, or by the session.
    pub fn closing(&self) -> Closing {
        Closing {
            shared: self.shared.clone(),
        }
    }
}

impl Clone for Sink {
    fn clone(&self) -> Self {
        self.shared.senders.fetch_add(1, Ordering::Relaxed);
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if self.shared.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.wake_writer();
        }
    }
}

impl Frames {
    /// Waits for frames and moves at most `limit` of them, oldest first,
    /// into `into`, a ping that is due ahead of them. The rest of a
    /// sender's write the socket took in part goes to `unwritten` first, to
    /// be written before the frames, or before the close frame: a close is
    /// reported before any frame still queued. Waiting, the writer has
    /// nothing in flight, so senders may write to the socket meanwhile.
    pub fn poll_take(
        &mut self,
        cx: &mut Context<'_>,
        into: &mut VecDeque<Frame>,
        unwritten: &mut Vec<u8>,
        limit: usize,
    ) -> Poll<Round> {
        self.poll_queued(cx, into, unwritten, limit, true)
    }

    /// [`Self::poll_take`] as a future.
    pub async fn take(
        &mut self,
        into: &mut VecDeque<Frame>,
        unwritten: &mut Vec<u8>,
        limit: usize,
    ) -> Round {
        poll_fn(|cx| self.poll_take(cx, into, unwritten, limit)).await
    }

    /// The next frame, closed or not; `None` once every sender is gone and
    /// nothing is left. For a queue without a socket ([`Sink::new`]).
    pub async fn recv(&mut self) -> Option<Frame> {
        let mut one = VecDeque::new();
        let mut unwritten = Vec::new();
        match poll_fn(|cx| self.poll_queued(cx, &mut one, &mut unwritten, 1, false)).await {
            Round::Frames => one.pop_front(),
            Round::Closing | Round::Gone => None,
        }
    }

    /// Moves what a sender left unwritten to `unwritten` and at most
    /// `limit` queued frames into `into`, or waits for one; `heed_close`:
    /// a close (checked under the lock, where a close between the check
    /// and the wait cannot be missed) ends the wait and comes first.
    fn poll_queued(
        &mut self,
        cx: &mut Context<'_>,
        into: &mut VecDeque<Frame>,
        unwritten: &mut Vec<u8>,
        limit: usize,
        heed_close: bool,
    ) -> Poll<Round> {
        let mut queue = self.shared.lock();
        queue.idle = false;
        // The writer takes what was held itself.
        queue.held = false;
        let had_unwritten = !queue.unwritten.is_empty();
        if had_unwritten {
            // Taken whole: a burst's buffer leaves the idle queue with it.
            let rest = std::mem::take(&mut queue.unwritten);
            if unwritten.is_empty() {
                *unwritten = rest;
            } else {
                unwritten.extend_from_slice(&rest);
            }
        }
        if heed_close && self.shared.is_closed() {
            return Poll::Ready(Round::Closing);
        }
        let before = into.len();
        let mut room = limit.max(1);
        if std::mem::take(&mut queue.ping) {
            into.push_back(Frame::Ping);
            room -= 1;
        }
        if room > 0 && !queue.frames.is_empty() {
            if into.is_empty() && queue.frames.len() <= room {
                // All of it: the two buffers change places, no frame moves.
                std::mem::swap(&mut queue.frames, into);
            } else {
                let taken = room.min(queue.frames.len());
                into.extend(queue.frames.drain(..taken));
            }
        }
        if into.len() > before || had_unwritten {
            drop(queue);
            self.shared.wake_room_waiters();
            return Poll::Ready(Round::Frames);
        }
        if self.shared.senders.load(Ordering::Acquire) == 0 {
            return Poll::Ready(Round::Gone);
        }
        queue.idle = true;
        park(&mut queue.writer, cx);
        Poll::Pending
    }

    /// How many frames are queued.
    pub fn queued(&self) -> usize {
        self.shared.lock().frames.len()
    }

    /// The next frame if one is queued.
    pub fn try_recv(&mut self) -> Option<Frame> {
        let frame = self.shared.lock().frames.pop_front();
        self.shared.wake_room_waiters();
        frame
    }
}

impl Drop for Frames {
    fn drop(&mut self) {
        let frames = {
            let mut queue = self.shared.lock();
            queue.receiver_gone = true;
            queue.idle = false;
            // Nothing will wait any more: the finished task is let go.
            queue.writer = None;
            std::mem::take(&mut queue.frames)
        };
        // Dropped outside the lock: the last reference to a notice frees it.
        drop(frames);
        // Nothing is queued any more: a sender waiting for room finds the
        // connection gone.
        self.shared.wake_room_waiters();
        // No sender counts past `receiver_gone`: the meter keeps the last
        // counts.
        if let Some(metered) = &self.metered {
            metered.meter.detach(metered.number);
        }
    }
}

impl Counted for Shared {
    fn counts(&self) -> (u64, u64) {
        self.lock().counts
    }
}

impl Closing {
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake_writer();
    }

    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// Ready once closed; a pending poll wakes `cx` at the close (or,
    /// spuriously, at the next frame queued: the writer has one waker).
    pub fn poll_closed(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut queue = self.shared.lock();
        if self.shared.is_closed() {
            return Poll::Ready(());
        }
        park(&mut queue.writer, cx);
        Poll::Pending
    }

    /// Completes once closed. Only one task may wait at a time (the
    /// connection's writer).
    pub async fn closed(&self) {
        poll_fn(|cx| self.poll_closed(cx)).await
    }
}

/// Wakes the writer's waker, if it left one.
fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

/// Leaves `cx`'s waker in the writer's slot, cloning it only if it changed.
fn park(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(waker) if waker.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::testing::Pipe;

    const TIMEOUT: Duration = Duration::from_secs(30);

    /// A close wakes the task waiting on it, whether it came before or
    /// after the wait began.
    #[tokio::test]
    async fn a_close_wakes_the_writer_waiting_on_it() {
        let (sink, _frames) = Sink::new(1);
        let closing = sink.closing();
        let waiting = tokio::spawn({
            let closing = closing.clone();
            async move { closing.closed().await }
        });
        tokio::task::yield_now().await;
        closing.close();
        tokio::time::timeout(TIMEOUT, waiting)
            .await
            .expect("woken in time")
            .expect("no panic");
        assert!(closing.is_closed());
        closing.closed().await;
    }

    /// A sender waiting for room on a queue past half full is woken by the
    /// writer's next round, and only once the queue is back to half; one
    /// asking while there is room is woken at once; a receiver's drop wakes
    /// every waiter.
    #[tokio::test]
    async fn a_sender_waiting_for_room_is_woken_when_the_writer_makes_it() {
        let (sink, mut frames) = Sink::new(4);
        while sink.room_to_spare() > 0 {
            sink.send("frame".to_string()).expect("room");
        }
        sink.send("past half".to_string()).expect("the other half");
        let wakeup = Arc::new(Notify::new());
        sink.wake_when_room(&wakeup);
        let woken = wakeup.notified();
        tokio::pin!(woken);
        assert!(!woken.as_mut().enable(), "no room yet");
        frames.try_recv().expect("a frame");
        assert_eq!(sink.room_to_spare(), 0, "still past half");
        assert!(!woken.as_mut().enable(), "not woken without room");
        frames.try_recv().expect("a frame");
        assert!(sink.room_to_spare() > 0);
        tokio::time::timeout(TIMEOUT, woken)
            .await
            .expect("woken by the round that made room");

        sink.wake_when_room(&wakeup);
        tokio::time::timeout(TIMEOUT, wakeup.notified())
            .await
            .expect("woken at once while there is room");

        while sink.room_to_spare() > 0 {
            sink.send("frame".to_string()).expect("room");
        }
        let other = Arc::new(Notify::new());
        sink.wake_when_room(&wakeup);
        sink.wake_when_room(&other);
        drop(frames);
        for waiter in [&wakeup, &other] {
            tokio::time::timeout(TIMEOUT, waiter.notified())
                .await
                .expect("the receiver's drop wakes every waiter");
        }
    }

    /// A writer waiting on an empty queue is woken by the next frame, by
    /// the close, and by the last sender's drop, each from another task.
    #[tokio::test]
    async fn a_waiting_writer_wakes_for_a_frame_a_close_and_the_last_sender() {
        async fn round(frames: &mut Frames, taken: &mut VecDeque<Frame>) -> Round {
            tokio::time::timeout(TIMEOUT, frames.take(taken, &mut Vec::new(), 8))
                .await
                .expect("woken in time")
        }
        let (sink, mut frames) = Sink::new(8);
        let mut taken = VecDeque::new();
        let sender = sink.clone();
        let sending = tokio::spawn(async move { sender.send("a".to_string()) });
        assert_eq!(round(&mut frames, &mut taken).await, Round::Frames);
        assert_eq!(taken, vec![Frame::Text("a".into())]);
        assert_eq!(sending.await.expect("no panic"), Ok(()));

        let dropping = tokio::spawn(async move { drop(sink) });
        assert_eq!(round(&mut frames, &mut VecDeque::new()).await, Round::Gone);
        dropping.await.expect("no panic");

        let (sink, mut frames) = Sink::new(8);
        let closing = sink.closing();
        let closer = tokio::spawn(async move { closing.close() });
        assert_eq!(
            round(&mut frames, &mut VecDeque::new()).await,
            Round::Closing
        );
        closer.await.expect("no panic");
    }

    /// A round takes at most its limit, oldest first, whether it takes
    /// the queue's buffer whole or part of it; a close is reported before
    /// what is still queued; what a full queue refused is flagged.
    #[test]
    fn rounds_take_in_order_up_to_their_limit() {
        let text = |text: &str| Frame::Text(text.into());
        let (sink, mut frames) = Sink::new(4);
        for t in ["a", "b", "c"] {
            sink.send(t.to_string()).expect("room");
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut taken = VecDeque::new();
        let round = frames.poll_take(&mut cx, &mut taken, &mut Vec::new(), 2);
        assert_eq!(round, Poll::Ready(Round::Frames));
        assert_eq!(taken, [text("a"), text("b")]);
        taken.clear();
        sink.send("d".to_string()).expect("room");
        let round = frames.poll_take(&mut cx, &mut taken, &mut Vec::new(), 8);
        assert_eq!(round, Poll::Ready(Round::Frames));
        assert_eq!(taken, [text("c"), text("d")], "the whole queue");
        for t in ["e", "f", "g", "h"] {
            sink.send(t.to_string()).expect("room");
        }
        assert_eq!(sink.send("i".to_string()), Err(SendError::Overflow));
        let round = frames.poll_take(&mut cx, &mut taken, &mut Vec::new(), 8);
        assert_eq!(round, Poll::Ready(Round::Closing));
        assert_eq!(frames.try_recv(), Some(text("e")));
    }

    /// A ping goes ahead of what is queued, outside the bound (a full
    /// queue still takes it), once however often it was asked for, and
    /// counts toward a round's limit.
    #[test]
    fn a_ping_jumps_the_queue_and_never_overflows_it() {
        let (sink, mut frames) = Sink::new(2);
        sink.send("a".to_string()).expect("room");
        sink.send("b".to_string()).expect("room");
        sink.ping().expect("a ping fits a full queue");
        sink.ping().expect("and another");
        assert!(!sink.closing().is_closed());
        let mut cx = Context::from_waker(Waker::noop());
        let mut taken = VecDeque::new();
        let round = frames.poll_take(&mut cx, &mut taken, &mut Vec::new(), 2);
        assert_eq!(round, Poll::Ready(Round::Frames));
        assert_eq!(taken, [Frame::Ping, Frame::Text("a".into())]);
        taken.clear();
        let round = frames.poll_take(&mut cx, &mut taken, &mut Vec::new(), 2);
        assert_eq!(round, Poll::Ready(Round::Frames));
        assert_eq!(taken, [Frame::Text("b".into())], "one ping");
        drop(frames);
        assert_eq!(sink.ping(), Err(SendError::Closed));
    }

    #[test]
    fn half_the_queue_is_spare_room() {
        let (sink, _frames) = Sink::new(4);
        assert_eq!(sink.room_to_spare(), 3, "one each at 0, 1 and 2 queued");
        sink.send("a".to_string()).expect("room");
        sink.send("b".to_string()).expect("room");
        assert_eq!(sink.room_to_spare(), 1, "half full");
        sink.send("c".to_string()).expect("room");
        assert_eq!(sink.room_to_spare(), 0);
    }

    #[test]
    fn a_full_queue_flags_overflow_instead_of_waiting() {
        let (sink, mut frames) = Sink::new(2);
        assert_eq!(sink.send("a".to_string()), Ok(()));
        assert_eq!(sink.send("b".to_string()), Ok(()));
        assert!(!sink.closing().is_closed());
        assert_eq!(sink.send("c".to_string()), Err(SendError::Overflow));
        assert!(sink.closing().is_closed());
        assert_eq!(frames.try_recv(), Some(Frame::Text("a".into())));
        assert_eq!(
            sink.send("d".to_string()),
            Err(SendError::Closed),
            "nothing is queued after the gap an overflow left, room or not"
        );
        assert_eq!(frames.try_recv(), Some(Frame::Text("b".into())));
        assert_eq!(frames.try_recv(), None);
        drop(frames);
        assert_eq!(sink.send("d".to_string()), Err(SendError::Closed));
    }

    /// Counts the times the writer was woken.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A queue on a pipe with `room` bytes, and a writer waiting on it
    /// (its wakes counted).
    fn waiting_writer(room: usize) -> (Sink, Frames, Arc<Pipe>, Arc<Wakes>) {
        let pipe = Pipe::with_room(room);
        let (sink, mut frames) = Sink::wired(4, pipe.wire(), None);
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let (mut taken, mut unwritten) = (VecDeque::new(), Vec::new());
        let round = frames.poll_take(&mut cx, &mut taken, &mut unwritten, 8);
        assert_eq!(round, Poll::Pending, "the writer waits");
        (sink, frames, pipe, wakes)
    }

    /// The notification of `notice` to `subscription`.
    fn notification(subscription: &Arc<str>, notice: &Notice) -> Frame {
        Frame::Notification {
            subscription: subscription.clone(),
            notice: notice.clone(),
        }
    }

    fn encoded(frames: &[Frame]) -> Vec<u8> {
        let mut out = Vec::new();
        for frame in frames {
            frame.encode(&mut out);
        }
        out
    }

    /// While the writer waits on an empty queue, a sender writes its
    /// frames to the socket itself (a subscriber's notifications in one
    /// write) and wakes nobody; a writer that has not begun to wait gets
    /// them queued.
    #[test]
    fn a_sender_writes_to_the_socket_itself_while_the_writer_waits() {
        let (sink, mut frames) = Sink::wired(4, Pipe::with_room(0).wire(), None);
        sink.send("early".to_string()).expect("room");
        assert_eq!(frames.try_recv(), Some(Frame::Text("early".into())));

        let (sink, mut frames, pipe, wakes) = waiting_writer(1 << 20);
        sink.send("a".to_string()).expect("room");
        let subscription: Arc<str> = "0xab".into();
        let notices = [Notice::new("1", None), Notice::new("2", None)];
        sink.notify_all(&subscription, notices.iter(), Via::Socket)
            .expect("room");
        let want = encoded(&[
            Frame::Text("a".into()),
            notification(&subscription, &notices[0]),
            notification(&subscription, &notices[1]),
        ]);
        assert_eq!(pipe.taken(), want);
        assert_eq!(pipe.writes(), 2, "one per send");
        assert_eq!(wakes.0.load(Ordering::Relaxed), 0, "nobody woken");
        assert_eq!(frames.try_recv(), None, "nothing queued");
    }

    /// Held frames wait for the release, with the writer asleep, and go
    /// out in one write with every other subscription's held on the
    /// connection; one hold per connection is handed out.
    #[test]
    fn held_frames_go_out_in_one_write_at_the_release() {
        let (sink, mut frames, pipe, wakes) = waiting_writer(1 << 20);
        let (first, second): (Arc<str>, Arc<str>) = ("0x1".into(), "0x2".into());
        let notices = [Notice::new("1", None), Notice::new("2", None)];
        let mut held = Vec::new();
        sink.hold_all(&first, notices.iter(), &mut held)
            .expect("room");
        sink.hold_all(&second, notices[..1].iter(), &mut held)
            .expect("room");
        assert_eq!(held.len(), 1, "one hold for the connection");
        assert_eq!((pipe.writes(), wakes.0.load(Ordering::Relaxed)), (0, 0));
        drop(held);
        let want = encoded(&[
            notification(&first, &notices[0]),
            notification(&first, &notices[1]),
            notification(&second, &notices[0]),
        ]);
        assert_eq!(pipe.taken(), want);
        assert_eq!(pipe.writes(), 1, "one write");
        assert_eq!(wakes.0.load(Ordering::Relaxed), 0, "nobody woken");
        assert_eq!(frames.try_recv(), None, "nothing left queued");
    }

    /// A frame sent behind a hold is queued after the held ones, never
    /// written ahead of them, and wakes the writer for all of it: the
    /// release then has nothing to do. A release the socket refuses wakes
    /// the writer too, as does a hold on a queue without a socket.
    #[test]
    fn what_comes_behind_a_hold_wakes_the_writer_for_all_of_it() {
        let (sink, mut frames, pipe, wakes) = waiting_writer(1 << 20);
        let subscription: Arc<str> = "0x1".into();
        let notice = Notice::new("1", None);
        let notification = notification(&subscription, &notice);
        let mut held = Vec::new();
        sink.hold_all(&subscription, [&notice].into_iter(), &mut held)
            .expect("room");
        sink.send("after".to_string()).expect("room");
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1, "woken");
        drop(held);
        assert_eq!(pipe.writes(), 0, "the writer's to write");
        let mut cx = Context::from_waker(Waker::noop());
        let mut taken = VecDeque::new();
        let round = frames.poll_take(&mut cx, &mut taken, &mut Vec::new(), 8);
        assert_eq!(round, Poll::Ready(Round::Frames));
        assert_eq!(taken, [notification.clone(), Frame::Text("after".into())]);

        let (sink, mut frames, pipe, wakes) = waiting_writer(0);
        let mut held = Vec::new();
        sink.hold_all(&subscription, [&notice].into_iter(), &mut held)
            .expect("room");
        drop(held);
        assert_eq!(pipe.writes(), 0);
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1, "woken to write it");
        assert_eq!(
            frames.try_recv(),
            Some(notification.clone()),
            "still queued"
        );

        let (sink, mut frames) = Sink::new(4);
        let round = frames.poll_take(&mut cx, &mut VecDeque::new(), &mut Vec::new(), 8);
        assert_eq!(round, Poll::Pending);
        let mut held = Vec::new();
        sink.hold_all(&subscription, [&notice].into_iter(), &mut held)
            .expect("room");
        drop(held);
        assert_eq!(
            frames.try_recv(),
            Some(notification),
            "handed to the reader"
        );
    }

    /// What the socket took only in part, the writer is woken to finish,
    /// before the frames queued after it; a socket that takes nothing
    /// leaves the frames queued.
    #[test]
    fn the_writer_finishes_a_write_the_socket_took_in_part() {
        let (sink, mut frames, pipe, wakes) = waiting_writer(5);
        sink.send("hello world".to_string()).expect("room");
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1, "woken to go on");
        sink.send("next".to_string()).expect("room");
        assert_eq!(pipe.writes(), 1, "the writer's turn");
        let mut cx = Context::from_waker(Waker::noop());
        let (mut taken, mut unwritten) = (VecDeque::new(), Vec::new());
        let round = frames.poll_take(&mut cx, &mut taken, &mut unwritten, 8);
        assert_eq!(round, Poll::Ready(Round::Frames));
        let mut whole = pipe.taken();
        whole.extend_from_slice(&unwritten);
        assert_eq!(whole, encoded(&[Frame::Text("hello world".into())]));
        assert_eq!(taken, [Frame::Text("next".into())]);

        let (sink, mut frames, pipe, wakes) = waiting_writer(0);
        sink.send("held".to_string()).expect("room");
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
        assert!(pipe.taken().is_empty());
        assert_eq!(frames.try_recv(), Some(Frame::Text("held".into())));
    }

    /// The rest of a sender's write precedes the close frame: a close
    /// reported to the writer hands it over.
    #[test]
    fn a_close_hands_the_writer_what_a_sender_left_unwritten() {
        let (sink, mut frames, _pipe, _wakes) = waiting_writer(3);
        sink.send("cut short".to_string()).expect("room");
        sink.closing().close();
        assert_eq!(
            sink.send("after".to_string()),
            Err(SendError::Closed),
            "nothing is queued after a close"
        );
        let mut cx = Context::from_waker(Waker::noop());
        let (mut taken, mut unwritten) = (VecDeque::new(), Vec::new());
        let round = frames.poll_take(&mut cx, &mut taken, &mut unwritten, 8);
        assert_eq!(round, Poll::Ready(Round::Closing));
        assert_eq!(unwritten, encoded(&[Frame::Text("cut short".into())])[3..]);
        assert!(taken.is_empty());
    }

    /// The notifications a queue takes, written or queued, count in its
    /// key's meter, with their text's bytes; those an overflow refused do
    /// not. The meter keeps them when the connection closes, and lets its
    /// queue and socket go.
    #[test]
    fn notifications_taken_are_counted_with_their_bytes() {
        let meter = Arc::new(chainsieve_usage::Meter::default());
        let pipe = Pipe::with_room(1 << 20);
        let (sink, frames) = Sink::wired(4, pipe.wire(), Some(meter.clone()));
        let subscription: Arc<str> = "0xab".into();
        let notices = [Notice::new("1", None), Notice::new("22", Some("c"))];
        sink.notify_all(&subscription, notices.iter(), Via::Socket)
            .expect("room");
        sink.notify_all(&subscription, notices.iter(), Via::Queue)
            .expect("room");
        let text: usize = notices
            .iter()
            .map(|notice| notification(&subscription, notice).to_text().len())
            .sum();
        let totals = meter.totals();
        assert_eq!((totals.notifications, totals.bytes), (4, 2 * text as u64));
        assert_eq!(
            sink.notify_all(&subscription, notices.iter(), Via::Queue),
            Err(SendError::Overflow)
        );
        assert_eq!(meter.totals().notifications, 4, "refused: not counted");
        drop((sink, frames));
        let totals = meter.totals();
        assert_eq!((totals.notifications, totals.bytes), (4, 2 * text as u64));
        assert_eq!(Arc::strong_count(&pipe), 1, "the socket is let go");
    }

    /// A subscriber's notifications are queued all or none: a queue
    /// without room for all of them overflows and keeps none.
    #[test]
    fn notifications_are_queued_all_or_none() {
        let (sink, mut frames) = Sink::new(2);
        let subscription: Arc<str> = "0xab".into();
        let notices = [
            Notice::new("1", None),
            Notice::new("2", None),
            Notice::new("3", None),
        ];
        assert_eq!(
            sink.notify_all(&subscription, notices.iter(), Via::Socket),
            Err(SendError::Overflow)
        );
        assert!(sink.closing().is_closed());
        assert_eq!(frames.try_recv(), None);
        let (sink, mut frames) = Sink::new(2);
        sink.notify_all(&subscription, notices[..2].iter(), Via::Queue)
            .expect("room for two");
        assert_eq!(
            frames
                .try_recv()
                .map(|frame| frame.to_text().contains("\"result\":1")),
            Some(true)
        );
    }
}
