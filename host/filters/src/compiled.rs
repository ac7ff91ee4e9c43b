//! Compiled components kept in the data directory (`compiled/`), so a
//! restart reads in milliseconds what cranelift took a second or more of
//! CPU to compile (docs/src/configuration.md, The data directory).
//!
//! A file is named by the keccak-256 of the component's bytes and by the
//! engine's compatibility (wasmtime's version and the settings that shape
//! its code, such as call deadlines): an engine reads only files it can
//! run. One that cannot be read is compiled again and written over; files
//! of other engines (an older wasmtime) are removed when the directory is
//! opened, and past [`MAX_KEPT`] the least recently used go.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use alloy_primitives::B256;
use anyhow::Context;
use wasmtime::Engine;
use wasmtime::component::Component;

/// The most compilations kept: the built-ins, the filters directory's and
/// the uploads' with room for their rewrites. The least recently used go
/// first.
pub const MAX_KEPT: usize = 256;

/// The suffix of every kept file.
const EXTENSION: &str = "cwasm";

/// The suffix of a file being written, renamed to its name once whole.
const PARTIAL: &str = "partial";

/// One engine's compilations in one directory.
pub struct KeptCompilations {
    /// The engine that compiles and reads them (a clone of the process's).
    engine: Engine,
    dir: PathBuf,
    /// The engine's compatibility, in every file name of it.
    engine_tag: String,
}

impl KeptCompilations {
    /// Opens `dir` for `engine`'s compilations (created when missing) and
    /// removes those of other engines.
    pub fn open(engine: &Engine, dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| {
            format!("creating the compiled filters' directory {}", dir.display())
        })?;
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let kept = Self {
            engine: engine.clone(),
            dir: dir.to_path_buf(),
            engine_tag: format!("{:016x}", hasher.finish()),
        };
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            let stale = match path.extension().and_then(|e| e.to_str()) {
                Some(EXTENSION) => !kept.is_ours(&path),
                // A write a stopped process left unfinished.
                Some(PARTIAL) => true,
                _ => false,
            };
            if stale {
                remove(&path);
            }
        }
        Ok(kept)
    }

    /// The component of `bytes` (whose keccak-256 is `hash`): read from
    /// its file when there is one this engine wrote, else compiled and
    /// kept.
    pub fn component(&self, hash: B256, bytes: &[u8]) -> anyhow::Result<Component> {
        let path = self.path(hash);
        match std::fs::read(&path) {
            Ok(artifact) => {
                // SAFETY: the file is one this server wrote with
                // `Component::serialize` into its own data directory,
                // which only the operator and the server write (as its
                // event log); wasmtime checks the artifact's header (its
                // version and the engine's settings) and refuses another's.
                match unsafe { Component::deserialize(&self.engine, &artifact) } {
                    Ok(component) => {
                        touch(&path);
                        return Ok(component);
                    }
                    Err(error) => tracing::warn!(
                        path = %path.display(),
                        "a kept compilation could not be read; compiling again: {error:#}"
                    ),
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(
                path = %path.display(),
                "a kept compilation could not be read; compiling again: {error}"
            ),
        }
        let component = Component::new(&self.engine, bytes)?;
        if let Err(error) = self.keep(&component, &path) {
            // Kept or not, the component serves; the next start compiles
            // it again.
            tracing::warn!(path = %path.display(), "a compilation could not be kept: {error:#}");
        }
        Ok(component)
    }

    /// Writes `component` to `path` whole or not at all (a temporary file
    /// renamed), then lets the least recently used go past [`MAX_KEPT`].
    fn keep(&self, component: &Component, path: &Path) -> anyhow::Result<()> {
        let artifact = component
            .serialize()
            .map_err(anyhow::Error::from)
            .context("serializing the compiled component")?;
        let partial = path.with_extension(format!("{EXTENSION}.{}.{PARTIAL}", std::process::id()));
        std::fs::write(&partial, artifact)
            .with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, path)
            .with_context(|| format!("renaming {} to {}", partial.display(), path.display()))?;
        let mut files = self.files()?;
        if files.len() > MAX_KEPT {
            files.sort_by_key(|(_, used)| std::cmp::Reverse(*used));
            for (old, _) in &files[MAX_KEPT..] {
                remove(old);
            }
        }
        Ok(())
    }

    fn path(&self, hash: B256) -> PathBuf {
        self.dir
            .join(format!("{hash:x}-{}.{EXTENSION}", self.engine_tag))
    }

    fn is_ours(&self, path: &Path) -> bool {
        path.file_stem()
            .and_then(|stem| stem.to_str())
            .is_some_and(|stem| stem.ends_with(&format!("-{}", self.engine_tag)))
    }

    /// Every kept file (of any engine) and when it was last used.
    fn files(&self) -> anyhow::Result<Vec<(PathBuf, SystemTime)>> {
        let entries = std::fs::read_dir(&self.dir)
            .with_context(|| format!("listing {}", self.dir.display()))?;
        let mut files = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some(EXTENSION) {
                continue;
            }
            let used = entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            files.push((path, used));
        }
        Ok(files)
    }
}

/// Marks `path` used now: the least recently used go first.
fn touch(path: &Path) {
    let touched = std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|file| file.set_modified(SystemTime::now()));
    if let Err(error) = touched {
        tracing::debug!(path = %path.display(), "marking a kept compilation used: {error}");
    }
}

fn remove(path: &Path) {
    if let Err(error) = std::fs::remove_file(path) {
        tracing::warn!(path = %path.display(), "removing a kept compilation: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::builtin_components;

    /// `dir` opened for a default engine.
    fn opened(dir: &Path) -> KeptCompilations {
        KeptCompilations::open(&Engine::default(), dir).expect("opened")
    }

    fn a_builtin() -> (B256, &'static [u8]) {
        let (_, bytes) = builtin_components()[0];
        (alloy_primitives::keccak256(bytes), bytes)
    }

    /// Compiled once, then read from its file: the second load is given
    /// bytes that are no component at all, and still answers.
    #[test]
    fn a_compilation_is_kept_and_read_back() {
        let dir = tempfile::tempdir().expect("a directory");
        let kept = opened(dir.path());
        let (hash, bytes) = a_builtin();
        kept.component(hash, bytes).expect("compiled");
        assert!(kept.path(hash).is_file());
        let read = kept
            .component(hash, b"not a component")
            .expect("read from its file");
        assert!(read.serialize().is_ok());
        // Another opening (a restart) reads it too.
        let again = opened(dir.path());
        again
            .component(hash, b"not a component")
            .expect("read after a restart");
    }

    /// A file that is no compilation is compiled again and written over.
    #[test]
    fn an_unreadable_file_is_compiled_again() {
        let dir = tempfile::tempdir().expect("a directory");
        let kept = opened(dir.path());
        let (hash, bytes) = a_builtin();
        std::fs::write(kept.path(hash), b"garbage").expect("written");
        kept.component(hash, bytes).expect("compiled again");
        kept.component(hash, b"not a component")
            .expect("the rewritten file reads");
    }

    /// Opening removes the files of other engines and unfinished writes,
    /// and leaves other files alone; a component whose bytes do not compile
    /// is an error, and nothing is kept of it.
    #[test]
    fn other_engines_files_go_and_bad_bytes_keep_nothing() {
        let dir = tempfile::tempdir().expect("a directory");
        let stale = dir
            .path()
            .join(format!("{:x}-0123456789abcdef.cwasm", B256::ZERO));
        std::fs::write(&stale, b"an older wasmtime's").expect("written");
        let unfinished = dir.path().join("a.cwasm.7.partial");
        std::fs::write(&unfinished, b"half").expect("written");
        let unrelated = dir.path().join("notes.txt");
        std::fs::write(&unrelated, b"the operator's").expect("written");
        let kept = opened(dir.path());
        assert!(!stale.exists(), "another engine's file is removed");
        assert!(!unfinished.exists(), "an unfinished write is removed");
        assert!(unrelated.exists(), "a file not of this kind stays");
        let hash = alloy_primitives::keccak256(b"not a component");
        assert!(kept.component(hash, b"not a component").is_err());
        assert!(!kept.path(hash).exists());
    }

    /// Past [`MAX_KEPT`], the least recently used file goes.
    #[test]
    fn the_least_recently_used_go_past_the_bound() {
        let dir = tempfile::tempdir().expect("a directory");
        let kept = opened(dir.path());
        let long_ago = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000);
        for n in 0..MAX_KEPT {
            let mut hash = B256::ZERO;
            hash[..8].copy_from_slice(&(n as u64).to_be_bytes());
            let path = kept.path(hash);
            std::fs::write(&path, b"x").expect("written");
            let file = std::fs::File::options()
                .write(true)
                .open(&path)
                .expect("open");
            file.set_modified(long_ago + std::time::Duration::from_secs(n as u64))
                .expect("dated");
        }
        let oldest = kept
            .files()
            .expect("listed")
            .into_iter()
            .min_by_key(|(_, used)| *used);
        let (oldest, _) = oldest.expect("files");
        let (hash, bytes) = a_builtin();
        kept.component(hash, bytes).expect("compiled");
        let files = kept.files().expect("listed");
        assert_eq!(files.len(), MAX_KEPT);
        assert!(!oldest.exists(), "the least recently used went");
        assert!(kept.path(hash).exists(), "the new one stays");
    }
}
