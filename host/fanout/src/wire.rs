//! The socket a connection's frames go to, as the queue sees it, and the
//! buffer frames are encoded into on their way there.
//!
//! A sender that finds the connection's writer waiting on an empty queue,
//! with nothing of its own in flight, writes its frames to the socket
//! itself ([`super::Sink`]): a notification then costs no queue slot, no
//! task wakeup and no poll of the writer, which were most of the user time
//! left per notification in the load benchmark (docs/src/architecture.md,
//! Fan-out).

use std::cell::RefCell;
use std::io;

use tokio::net::TcpStream;

/// A socket that takes what it can of a write without waiting. Any thread
/// may call it: the queue's lock decides who writes, so writes never
/// interleave.
pub trait Wire: Send + Sync + std::fmt::Debug {
    /// Writes what the socket takes of `bytes` now; `WouldBlock` when it
    /// takes nothing.
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize>;
}

/// What a connection's queue writes to: the shared stream itself, so a
/// sender reaches the descriptor through one pointer (a box around the
/// `Arc` was one more cache miss per notification with thousands of
/// connections taking turns).
impl Wire for TcpStream {
    /// The system call alone, without tokio's readiness check first: with
    /// thousands of sockets each one's readiness word is a cache miss per
    /// notification. A `WouldBlock` here leaves tokio's readiness stale,
    /// which costs the writer one `WouldBlock` of its own before it waits.
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        socket2::SockRef::from(self).send(bytes)
    }
}

/// A thread's buffer that grew past this (a round of large frames) is
/// given back: rounds up to it reuse the one allocation.
const KEEP_SCRATCH: usize = 4 << 20;

thread_local! {
    /// Where frames are encoded for a write: one buffer per thread (a
    /// worker's, an actor's), still in its cache from the connection
    /// before. A buffer per connection was cold at every round when many
    /// connections take turns (10,000 in the load benchmark: copying into
    /// it was 2.6% of the server's CPU).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `write` with this thread's encoding buffer, empty.
pub fn with_scratch<R>(write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        let written = write(scratch);
        if scratch.capacity() > KEEP_SCRATCH {
            *scratch = Vec::new();
        }
        written
    })
}
