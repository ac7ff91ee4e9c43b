//! The components a server runs: the built-ins embedded at build time,
//! every `*.wasm` in the filters directory, and the components uploaded
//! through the admin API (`PUT /admin/filters/<topic>`). A directory
//! component whose topic matches a built-in replaces it, and an upload
//! replaces both (an upload is the whole deployment's, a file one
//! server's); a new topic becomes a new `eth_subscribe` event type.
//!
//! At startup a component that fails to load stops the server with a
//! message naming the file and the reason. A later [`FilterRegistry::rescan`]
//! (the directory changed under a running server) is lenient instead: a bad
//! file is reported and whatever that path served before keeps serving.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// A file of the filters directory that is not being served, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub file: PathBuf,
    pub reason: String,
}

/// Loaded components: the built-ins and the directory's.
#[derive(Debug, Default)]
pub struct FilterRegistry {
    builtins: BTreeMap<String, FilterComponent>,
    /// By file, in name order (the first file declaring a topic wins).
    from_dir: BTreeMap<PathBuf, FilterComponent>,
    /// Uploaded, by topic: over the directory's and the built-ins.
    uploaded: BTreeMap<String, FilterComponent>,
    /// What the last scan refused.
    rejected: Vec<Rejected>,
}

impl FilterRegistry {
    /// Loads the built-ins and the directory, refusing any bad file.
    pub fn load(engine: &FilterEngine, dir: &Path) -> anyhow::Result<Self> {
        let mut registry = Self::default();
        for (file, bytes) in builtin_components() {
            let component = engine.load(&format!("built-in {file}"), bytes)?;
            if let Some(other) = registry
                .builtins
                .insert(component.manifest.topic.clone(), component)
            {
                bail!(
                    "two built-in filters declare topic {}: {}",
                    other.manifest.topic,
                    other.origin
                );
            }
        }
        let mut topics: BTreeMap<String, PathBuf> = BTreeMap::new();
        for path in wasm_files(dir)? {
            let origin = path.display().to_string();
            let bytes = std::fs::read(&path).with_context(|| format!("reading filter {origin}"))?;
            let component = engine
                .load(&origin, &bytes)
                .with_context(|| format!("refusing filter {origin}"))?;
            let topic = component.manifest.topic.clone();
            if let Some(first) = topics.insert(topic.clone(), path.clone()) {
                bail!(
                    "filters {} and {origin} both declare topic {topic}",
                    first.display()
                );
            }
            registry.from_dir.insert(path, component);
        }
        registry.log_active();
        Ok(registry)
    }

    /// Reads the directory again: new and changed files are loaded, removed
    /// ones dropped. A file that fails to load is reported in
    /// [`Self::rejected`] and its previous version, if any, stays.
    pub fn rescan(&mut self, engine: &FilterEngine, dir: &Path) {
        self.rejected.clear();
        let files = match wasm_files(dir) {
            Ok(files) => files,
            Err(error) => {
                tracing::error!(dir = %dir.display(), error = format!("{error:#}"), "cannot read the filters directory; keeping the loaded filters");
                return;
            }
        };
        let mut next = BTreeMap::new();
        for path in files {
            let origin = path.display().to_string();
            let previous = self.from_dir.remove(&path);
            let loaded = std::fs::read(&path)
                .with_context(|| format!("reading filter {origin}"))
                .and_then(|bytes| {
                    let hash = alloy_primitives::keccak256(&bytes).to_string();
                    match &previous {
                        Some(same) if same.hash == hash => Ok(same.clone()),
                        _ => engine.load(&origin, &bytes),
                    }
                });
            match loaded {
                Ok(component) => {
                    next.insert(path, component);
                }
                Err(error) => {
                    let reason = format!("{error:#}");
                    tracing::error!(file = %origin, %reason, kept = previous.is_some(), "refusing filter");
                    self.rejected.push(Rejected {
                        file: path.clone(),
                        reason,
                    });
                    if let Some(previous) = previous {
                        next.insert(path, previous);
                    }
                }
            }
        }
        self.from_dir = next;
    }

    /// Serves `component` for its topic over the directory and the
    /// built-ins.
    pub fn upload(&mut self, component: FilterComponent) {
        self.uploaded
            .insert(component.manifest.topic.clone(), component);
    }

    /// Stops serving the upload for `topic` (the directory's file or the
    /// built-in serves again, if any); false if there was none.
    pub fn remove_upload(&mut self, topic: &str) -> bool {
        self.uploaded.remove(topic).is_some()
    }

    /// The upload serving `topic`, if any.
    pub fn uploaded(&self, topic: &str) -> Option<&FilterComponent> {
        self.uploaded.get(topic)
    }

    /// The component serving each topic: an upload over the directory's
    /// over the built-in. Of two files declaring one topic the first by
    /// name serves; the other is reported.
    pub fn active(&self) -> BTreeMap<String, FilterComponent> {
        let mut active = self.builtins.clone();
        let mut claimed: BTreeMap<&str, &Path> = BTreeMap::new();
        for (path, component) in &self.from_dir {
            let topic = component.manifest.topic.as_str();
            if claimed.contains_key(topic) {
                continue;
            }
            claimed.insert(topic, path);
            active.insert(topic.to_string(), component.clone());
        }
        for (topic, component) in &self.uploaded {
            active.insert(topic.clone(), component.clone());
        }
        active
    }

    /// Files the last scan did not serve, and why: unreadable or failing to
    /// load, or declaring a topic an earlier file already serves.
    pub fn rejected(&self) -> Vec<Rejected> {
        let mut rejected = self.rejected.clone();
        let mut claimed: BTreeMap<&str, &Path> = BTreeMap::new();
        for (path, component) in &self.from_dir {
            let topic = component.manifest.topic.as_str();
            let reason = if self.uploaded.contains_key(topic) {
                format!(
                    "topic {topic} is served by its upload (PUT /admin/filters/{topic}), which wins over the directory"
                )
            } else if let Some(first) = claimed.get(topic) {
                format!("topic {topic} is already served by {}", first.display())
            } else {
                claimed.insert(topic, path);
                continue;
            };
            rejected.push(Rejected {
                file: path.clone(),
                reason,
            });
        }
        rejected
    }

    fn log_active(&self) {
        for (topic, component) in self.active() {
            match self.builtins.get(&topic) {
                Some(builtin) if builtin.origin == component.origin => {}
                Some(_) => {
                    tracing::info!(%topic, file = %component.origin, "filter replaces a built-in")
                }
                None => tracing::info!(%topic, file = %component.origin, "filter adds a topic"),
            }
        }
        for Rejected { file, reason } in self.rejected() {
            tracing::warn!(file = %file.display(), %reason, "filter not served");
        }
    }
}

/// The `*.wasm` files of `dir`, sorted; none if it does not exist.
fn wasm_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !dir.exists() {
        tracing::debug!(dir = %dir.display(), "no filters directory; running the built-ins only");
        return Ok(Vec::new());
    }
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the filters directory {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("listing the filters directory {}", dir.display()))?;
    files.retain(|p| p.extension().is_some_and(|e| e == "wasm") && p.is_file());
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::builtin;

    /// An upload serves over the directory's file and the built-in of its
    /// topic; the file is reported as not served, saying why; removing the
    /// upload gives the topic back to the file.
    #[test]
    fn an_upload_wins_over_the_directory_and_the_built_in() {
        let (engine, heads) = builtin("newHeads");
        let dir = tempfile::tempdir().expect("temp dir");
        let mut registry = FilterRegistry::load(&engine, dir.path()).expect("built-ins");
        let mut file = heads.clone();
        file.origin = dir.path().join("heads.wasm").display().to_string();
        registry
            .from_dir
            .insert(dir.path().join("heads.wasm"), file.clone());
        assert_eq!(registry.active()["newHeads"].origin, file.origin);

        let mut uploaded = heads.clone();
        uploaded.origin = "uploaded newHeads".into();
        registry.upload(uploaded);
        assert_eq!(registry.active()["newHeads"].origin, "uploaded newHeads");
        let rejected = registry.rejected();
        assert_eq!(rejected.len(), 1);
        assert!(
            rejected[0].reason.contains("served by its upload"),
            "{}",
            rejected[0].reason
        );

        assert!(registry.remove_upload("newHeads"));
        assert!(!registry.remove_upload("newHeads"), "gone already");
        assert_eq!(registry.active()["newHeads"].origin, file.origin);
        assert!(registry.rejected().is_empty());
    }
}
