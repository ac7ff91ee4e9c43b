//! Delivery to connections. Each connection has a bounded queue of outbound
//! frames ([`Sink`]); the filter actors push notifications into it without
//! ever waiting. A connection whose queue is full is flagged ([`Closing`])
//! and closed by its session with a reason, so one slow reader never
//! stalls the others.
//!
//! A notification is queued as its parts, not as text: the subscription id
//! and the event's [`Notice`] (payload and cursor, made once per event and
//! shared by every subscriber). The session's writer splices them into its
//! socket's write buffer, so a notification costs each subscriber two
//! reference counts and no allocation (docs/src/architecture.md, Fan-out).
//! While the writer waits on an empty queue, a sender writes to the
//! connection's [`Wire`] itself, and the notification is not queued at all.
//! The topics of one step hold their frames to a connection until the last
//! of them is done, and the step goes out in one write ([`Together`]).
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_usage`].

mod frame;
mod queue;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;
mod together;
mod wire;

pub use frame::{Frame, Notice, ended, new_id};
pub use queue::{Closing, Frames, Held, Round, SendError, Sink, Via};
pub use together::Together;
pub use wire::{Wire, with_scratch};
