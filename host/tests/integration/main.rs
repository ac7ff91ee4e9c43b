//! The host's integration tests, one binary (each file a module, so the
//! whole stack is linked once): the component harness and the built-ins'
//! components, the binary as processes (failover, the resuming clients
//! across kills), the fuzzer, the reach property test, the import-cycle
//! check and the book's checks.

mod binary;
mod clients;
mod components;
mod docs;
mod failover;
mod fuzz;
mod harness;
mod layering;
mod reach;
