//! Where the index's writes go: straight into the chain's store, or (on
//! an ingest that leads the chain) first into the bus's price journal so
//! that every other server applies the same writes in the same order
//! (docs/src/architecture.md, The bus). The index knows neither: it hands
//! each write to a [`Recorder`].

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::store::{PriceStore, PriceWrite};

/// Takes the index's writes, in the order it makes them.
pub trait Recorder: Send + Sync {
    /// Records `write`; once it returns `Ok`, the store holds it.
    fn record(&self, write: PriceWrite) -> BoxFuture<'_, anyhow::Result<()>>;
}

/// Writes into the store alone: a server that is the only one to index
/// the chain.
#[derive(Debug)]
pub struct InStore(pub Arc<PriceStore>);

impl Recorder for InStore {
    fn record(&self, write: PriceWrite) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move { self.0.write(&write) })
    }
}
