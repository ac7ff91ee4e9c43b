//! Helpers for the unit tests of the actor and its users: a built-in
//! component, an empty log, and a subscriber to everything an actor
//! delivers.

use std::sync::Arc;

use super::actor::{FilterHandle, Start, Subscribe};
use super::{FilterComponent, FilterEngine, FilterRegistry};
use chainsieve_config::{FiltersConfig, LogConfig};
use chainsieve_eventlog::EventLog;
use chainsieve_fanout::{Frames, Sink};

/// The engine and the built-in component serving `topic`.
pub fn builtin(topic: &str) -> (Arc<FilterEngine>, FilterComponent) {
    let config = FiltersConfig {
        dir: std::env::temp_dir().join("chainsieve-no-filters-dir"),
        ..FiltersConfig::default()
    };
    let engine = FilterEngine::new(&config).expect("engine");
    let registry = FilterRegistry::load(&engine, &config.dir).expect("built-ins");
    let component = registry.active().remove(topic).expect("a built-in topic");
    (engine, component)
}

/// An empty log of chain `eth`, bounded by the defaults.
pub fn log() -> Arc<EventLog> {
    Arc::new(EventLog::new("eth", 1_024, LogConfig::default().memory_mib))
}

/// Subscribes `key` with no parameters (everything); returns its frames.
pub async fn subscribe_all(handle: &FilterHandle, key: u64) -> Frames {
    let (sink, frames) = Sink::new(1_024);
    handle
        .subscribe(to_everything(key, sink))
        .await
        .expect("subscribed");
    frames
}

/// Subscription `key` (id `0x<key>`) with no parameters (everything),
/// live from now, into `sink`.
pub fn to_everything(key: u64, sink: Sink) -> Subscribe {
    Subscribe {
        key,
        id: format!("0x{key}").into(),
        params: "[]".into(),
        sink,
        start: Start::Now,
        resume: None,
        finality: None,
        history: None,
        view: None,
    }
}
