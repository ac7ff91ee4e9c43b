//! Uploaded filter components on the bus (docs/src/bus.md, Filters
//! uploaded once): the object store `<prefix>-filters`, one object per
//! topic holding the component's bytes. Every edge loads them at start and
//! watches the store, so a component uploaded through one edge's admin
//! API serves on every edge, and on an edge started later.

use anyhow::Context as _;
use async_nats::jetstream::object_store::{self, ObjectStore};
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use tokio::io::AsyncReadExt as _;
use tokio::sync::mpsc;

use crate::{UploadChange, UploadStore, Uploaded};
use chainsieve_bus::Bus;
use chainsieve_bus::bucket::{self, ATTEMPT};

/// The uploads' object store.
#[derive(Clone)]
pub struct ObjectUploads {
    store: ObjectStore,
}

impl std::fmt::Debug for ObjectUploads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectUploads").finish_non_exhaustive()
    }
}

impl ObjectUploads {
    /// The uploads' object store on `bus`, created if it does not exist.
    pub async fn open(bus: &Bus) -> anyhow::Result<Self> {
        let config = object_store::Config {
            bucket: format!("{}-filters", bus.config().prefix),
            storage: async_nats::jetstream::stream::StorageType::File,
            num_replicas: bus.config().replicas,
            ..Default::default()
        };
        let store = bus.create_object_store(config).await?;
        Ok(Self { store })
    }

    /// The bytes of `topic`'s upload; `None` if it is gone.
    async fn read(store: &ObjectStore, topic: &str) -> anyhow::Result<Option<Vec<u8>>> {
        let mut object = match store.get(topic).await {
            Ok(object) => object,
            Err(error) if error.kind() == object_store::GetErrorKind::NotFound => return Ok(None),
            Err(error) => {
                return Err(error).with_context(|| format!("reading the upload of {topic}"));
            }
        };
        let mut bytes = Vec::new();
        object
            .read_to_end(&mut bytes)
            .await
            .with_context(|| format!("reading the upload of {topic}"))?;
        Ok(Some(bytes))
    }
}

impl UploadStore for ObjectUploads {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Uploaded>> {
        Box::pin(async move {
            let names = tokio::time::timeout(ATTEMPT, async {
                let listed = self.store.list().await?;
                anyhow::Ok(
                    listed
                        .filter_map(|info| async move { info.ok().filter(|info| !info.deleted) })
                        .map(|info| info.name)
                        .collect::<Vec<String>>()
                        .await,
                )
            })
            .await
            .context("listing the uploads: no answer")?
            .context("listing the uploads")?;
            let mut uploads = Vec::with_capacity(names.len());
            for topic in names {
                if let Some(bytes) = Self::read(&self.store, &topic).await? {
                    uploads.push((topic, bytes));
                }
            }
            Ok(uploads)
        })
    }

    fn changes(&self) -> BoxStream<'static, UploadChange> {
        let (changes, taken) = mpsc::channel(64);
        tokio::spawn(watch(self.store.clone(), changes));
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(taken))
    }

    fn put(&self, topic: String, bytes: Vec<u8>) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move {
            tokio::time::timeout(
                ATTEMPT * 4,
                self.store.put(topic.as_str(), &mut bytes.as_slice()),
            )
            .await
            .context("storing the upload: no answer")?
            .with_context(|| format!("storing the upload of {topic}"))?;
            Ok(())
        })
    }

    fn remove(&self, topic: String) -> BoxFuture<'_, anyhow::Result<bool>> {
        Box::pin(async move {
            match tokio::time::timeout(ATTEMPT, self.store.delete(topic.as_str()))
                .await
                .context("removing the upload: no answer")?
            {
                Ok(()) => Ok(true),
                Err(error) if error.kind() == object_store::DeleteErrorKind::NotFound => Ok(false),
                Err(error) => Err(error).with_context(|| format!("removing the upload of {topic}")),
            }
        })
    }
}

/// Watches the store (every object's latest version first, then every
/// change) into `changes`, watching again after a failure, until the
/// stream is dropped.
async fn watch(store: ObjectStore, changes: mpsc::Sender<UploadChange>) {
    bucket::rewatch(&changes, "the uploads", || async {
        let mut infos = store.watch_with_history().await?;
        while let Some(info) = infos.next().await {
            let info = info?;
            let change = if info.deleted {
                UploadChange::Removed(info.name)
            } else {
                match ObjectUploads::read(&store, &info.name).await? {
                    Some(bytes) => UploadChange::Put(info.name, bytes),
                    None => UploadChange::Removed(info.name),
                }
            };
            if changes.send(change).await.is_err() {
                break;
            }
        }
        anyhow::Ok(())
    })
    .await;
}
