//! Filter components uploaded through the admin API (`PUT
//! /admin/filters/<topic>`, docs/src/filters.md, Uploading a filter):
//! each is compiled and checked exactly as a file dropped in the filters
//! directory, refused with the same reasons, kept by the upload store
//! (the embedded database, or the bus's object store every edge follows),
//! then swapped in by the hot swap with the same guarantees
//! ([`super::reload`]).

use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::{mpsc, oneshot};

use super::reload::{Command, upload_origin};
use chainsieve_filters::FilterEngine;
use chainsieve_filters::registry::Rejected;
use chainsieve_uploads::UploadStore;

/// Why an upload or a removal did nothing.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The component is refused: the reason, as for a file.
    #[error("{0}")]
    Invalid(String),
    #[error("no upload serves topic {0}")]
    NotFound(String),
    #[error("{0:#}")]
    Failed(anyhow::Error),
}

/// What an accepted upload serves.
#[derive(Debug)]
pub struct Accepted {
    pub hash: String,
    pub version: String,
    /// What chains refused of it (a live subscription's params the new
    /// component refuses): those keep the old one.
    pub refused: Vec<Rejected>,
}

/// The admin API's way to upload and remove components.
pub struct Uploads {
    engine: Arc<FilterEngine>,
    store: Arc<dyn UploadStore>,
    /// To the hot swap, which owns the registry.
    commands: mpsc::Sender<Command>,
}

impl std::fmt::Debug for Uploads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uploads")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// The largest component an upload may be.
pub const MAX_UPLOAD_BYTES: usize = 64 << 20;

impl Uploads {
    pub fn new(
        engine: Arc<FilterEngine>,
        store: Arc<dyn UploadStore>,
        commands: mpsc::Sender<Command>,
    ) -> Self {
        Self {
            engine,
            store,
            commands,
        }
    }

    /// Compiles `bytes`, checks it declares `topic`, keeps it and serves
    /// it on every chain.
    pub async fn put(&self, topic: &str, bytes: Vec<u8>) -> Result<Accepted, UploadError> {
        if !chainsieve_config::is_plain_name(topic) {
            return Err(UploadError::Invalid(format!(
                "\"{topic}\" is not a topic: 1 to 64 letters, digits, '_' or '-'"
            )));
        }
        let engine = self.engine.clone();
        let origin = upload_origin(topic);
        let (component, bytes) = tokio::task::spawn_blocking(move || {
            let loaded = engine.load(&origin, &bytes);
            (loaded, bytes)
        })
        .await
        .context("compiling the upload")
        .map_err(UploadError::Failed)?;
        let component = component.map_err(|error| UploadError::Invalid(format!("{error:#}")))?;
        let declared = &component.manifest.topic;
        if declared != topic {
            return Err(UploadError::Invalid(format!(
                "the component declares topic {declared}, not {topic}: upload it to /admin/filters/{declared}"
            )));
        }
        self.store
            .put(topic.to_string(), bytes)
            .await
            .map_err(UploadError::Failed)?;
        let (hash, version) = (component.hash.clone(), component.version.clone());
        let (answer, refused) = oneshot::channel();
        self.ask(Command::Upload(Box::new(component), answer))
            .await?;
        let refused = refused.await.map_err(|_| stopped())?;
        Ok(Accepted {
            hash,
            version,
            refused,
        })
    }

    /// Forgets `topic`'s upload and stops serving it. The store says
    /// whether there was one: on the bus this edge may learn of the
    /// removal from the store's watch before its own command comes.
    pub async fn remove(&self, topic: &str) -> Result<(), UploadError> {
        let kept = self
            .store
            .remove(topic.to_string())
            .await
            .map_err(UploadError::Failed)?;
        let (answer, removed) = oneshot::channel();
        self.ask(Command::Remove(topic.to_string(), answer)).await?;
        removed.await.map_err(|_| stopped())?;
        match kept {
            true => Ok(()),
            false => Err(UploadError::NotFound(topic.to_string())),
        }
    }

    async fn ask(&self, command: Command) -> Result<(), UploadError> {
        self.commands.send(command).await.map_err(|_| stopped())
    }
}

fn stopped() -> UploadError {
    UploadError::Failed(anyhow::anyhow!("the server is shutting down"))
}
