//! The components a server runs: the built-ins embedded at build time, then
//! every `*.wasm` in the filters directory. A directory component whose
//! topic matches a built-in replaces it; a new topic becomes a new
//! `eth_subscribe` event type. A component that fails to load stops startup
//! with a message naming the file and the reason.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};

use super::engine::{FilterComponent, FilterEngine};

mod builtin {
    include!(concat!(env!("OUT_DIR"), "/builtin_filters.rs"));
}

/// Where this build published every component it compiled, the built-ins
/// and the examples (`target/filters`): a starting point for a filters
/// directory.
pub const BUILT_FILTERS_DIR: &str = env!("CHAINSIEVE_BUILT_FILTERS_DIR");

/// The embedded built-in components: (file name, bytes).
pub fn builtin_components() -> &'static [(&'static str, &'static [u8])] {
    builtin::BUILTIN
}

/// Loaded components by topic.
#[derive(Debug, Default)]
pub struct FilterRegistry {
    by_topic: BTreeMap<String, FilterComponent>,
}

impl FilterRegistry {
    pub fn load(engine: &FilterEngine, dir: &Path) -> anyhow::Result<Self> {
        let mut registry = Self::default();
        for (file, bytes) in builtin_components() {
            let component = engine.load(&format!("built-in {file}"), bytes)?;
            if let Some(other) = registry
                .by_topic
                .insert(component.manifest.topic.clone(), component)
            {
                bail!(
                    "two built-in filters declare topic {}: {}",
                    other.manifest.topic,
                    other.origin
                );
            }
        }
        if !dir.exists() {
            tracing::debug!(dir = %dir.display(), "no filters directory; running the built-ins only");
            return Ok(registry);
        }
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("reading the filters directory {}", dir.display()))?
            .map(|entry| entry.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .with_context(|| format!("listing the filters directory {}", dir.display()))?;
        files.retain(|p| p.extension().is_some_and(|e| e == "wasm"));
        files.sort();
        let mut from_dir: BTreeMap<String, String> = BTreeMap::new();
        for path in files {
            let origin = path.display().to_string();
            let bytes = std::fs::read(&path).with_context(|| format!("reading filter {origin}"))?;
            let component = engine
                .load(&origin, &bytes)
                .with_context(|| format!("refusing filter {origin}"))?;
            let topic = component.manifest.topic.clone();
            if let Some(first) = from_dir.insert(topic.clone(), origin.clone()) {
                bail!("filters {first} and {origin} both declare topic {topic}");
            }
            match registry.by_topic.insert(topic.clone(), component) {
                Some(builtin) => {
                    tracing::info!(%topic, file = %origin, replaced = %builtin.origin, "filter replaces a built-in")
                }
                None => tracing::info!(%topic, file = %origin, "filter adds a topic"),
            }
        }
        Ok(registry)
    }

    pub fn components(&self) -> impl Iterator<Item = &FilterComponent> {
        self.by_topic.values()
    }

    pub fn get(&self, topic: &str) -> Option<&FilterComponent> {
        self.by_topic.get(topic)
    }
}
