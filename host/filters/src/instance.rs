//! What a filter actor calls: an instance of a component, made by an
//! [`Instantiate`]. The engine makes wasm instances; the actor's own tests
//! make stand-ins that trap, time out or refuse on cue, so its supervision
//! (rebuild, replay, disable, swap) is tested without a misbehaving guest.

use chainsieve_filter_core::Matches;
use chainsieve_watchlists::views::View;

use super::contract::Delivery;

use super::engine::{FilterComponent, FilterEngine, FilterInstance};

/// One instance of a component. Any error means it must be rebuilt.
pub trait Instance: Send {
    /// `Ok(Err(message))` is the component refusing the parameters.
    fn subscribe(&mut self, key: u64, params: &str) -> anyhow::Result<Result<Delivery, String>>;
    fn unsubscribe(&mut self, key: u64) -> anyhow::Result<()>;
    /// Matches a batch in the layout the component reads, as of `view` of
    /// the watchlists.
    fn match_batch(&mut self, batch: &[u8], view: Option<&View>) -> anyhow::Result<Matches>;
}

/// Makes fresh instances of a component.
pub trait Instantiate: Send + Sync {
    fn instantiate(&self, component: &FilterComponent) -> anyhow::Result<Box<dyn Instance>>;
}

impl Instance for FilterInstance {
    fn subscribe(&mut self, key: u64, params: &str) -> anyhow::Result<Result<Delivery, String>> {
        FilterInstance::subscribe(self, key, params)
    }

    fn unsubscribe(&mut self, key: u64) -> anyhow::Result<()> {
        FilterInstance::unsubscribe(self, key)
    }

    fn match_batch(&mut self, batch: &[u8], view: Option<&View>) -> anyhow::Result<Matches> {
        FilterInstance::match_batch(self, batch, view)
    }
}

impl Instantiate for FilterEngine {
    fn instantiate(&self, component: &FilterComponent) -> anyhow::Result<Box<dyn Instance>> {
        let instance = FilterEngine::instantiate(self, component)?;
        Ok(Box::new(instance))
    }
}
