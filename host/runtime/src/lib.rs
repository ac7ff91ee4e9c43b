//! What every long-lived part of the server runs on:
//!
//! - [`tasks`] — the supervisor every long-lived task is spawned on: run
//!   again with backoff, its part reported not ready, or the server
//!   stopped with the reason, as the task's kind says.
//! - [`queues`] — the bounded queues between long-lived tasks, watched
//!   for their depth.
//! - [`metrics`] — the metric handles the pipeline counts with.
//! - [`clock`] — Unix seconds.
//! - [`embedded`] — the embedded database's files.
//!
//! May use (docs/src/architecture.md, Crates): no other crate of the
//! workspace.

pub mod clock;
pub mod embedded;
pub mod metrics;
pub mod queues;
pub mod tasks;
