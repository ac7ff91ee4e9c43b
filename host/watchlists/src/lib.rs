//! Watchlists (docs/src/watchlists.md): named address sets an API key
//! owns and edits while the server runs, up to a million addresses each.
//!
//! - [`index`] — which watchlists every watched address is in, as of each
//!   edit a reader may still be before: what matching looks addresses up
//!   in, one hash probe an address;
//! - [`store`] — where they persist: the embedded database on a server of
//!   role `all` (`watchlists.redb` under `data_dir`, or in memory);
//! - [`views`] — which edits the chains' readers still read them as of.
//!
//! [`Watchlists`] is the service: reads answer from memory; every change
//! goes to one editor task, which checks it whole against the limits,
//! commits it to the store in one transaction and only then applies it to
//! the index, so an edit is all or nothing and edits are numbered in the
//! order they were applied.
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_config`],
//! [`chainsieve_filter_core`], [`chainsieve_runtime`].

pub mod index;
pub mod store;
pub mod views;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use chainsieve_runtime::clock::unix_now;
use chainsieve_runtime::queues::Queues;
use chainsieve_runtime::tasks::{Part, Tasks};
pub use index::{Address, Handle, Index, Seq};
use store::{Change, ListRecord, WatchlistStore};
use views::{View, Views};

/// The part of the server the editor serves.
pub const PART: Part = Part::Service("watchlists");

/// Changes waiting for the editor; a caller past it waits for room.
const EDIT_QUEUE: usize = 64;

/// How often the editor forgets what every view has passed, between edits.
const SETTLE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Why a watchlist call was refused.
#[derive(Debug, thiserror::Error)]
pub enum WatchlistError {
    #[error("watchlist not found: this API key has no watchlist named \"{0}\"")]
    NotFound(String),
    #[error("this API key already has a watchlist named \"{0}\"")]
    Exists(String),
    /// Well-formed, over a limit of the key's plan.
    #[error("{0}")]
    Limit(String),
    #[error("{0}")]
    Invalid(String),
    #[error("the watchlist store failed: {0:#}")]
    Store(anyhow::Error),
    #[error("the watchlist service is stopping")]
    Stopped,
}

/// The limits of the caller's plan, with the settings they come from.
#[derive(Clone, Debug)]
pub struct Most {
    pub watchlists: usize,
    pub addresses: usize,
    pub plan: Arc<str>,
    /// The settings to name in a refusal: `plans.<name>.max_watchlists` or
    /// `watchlists.max_per_key`, and the same for addresses.
    pub watchlists_origin: String,
    pub addresses_origin: String,
}

/// What a watchlist is, as calls answer it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub name: String,
    pub size: usize,
    /// Unix seconds.
    pub created: u64,
    pub updated: u64,
}

/// The most addresses one page of a watchlist holds, and how many unless
/// asked.
pub const MAX_PAGE: usize = 10_000;
pub const DEFAULT_PAGE: usize = 1_000;

/// A watchlist and one page of its addresses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Inspection {
    #[serde(flatten)]
    pub summary: Summary,
    /// `0x` hex, in byte order.
    pub addresses: Vec<String>,
    /// Where the next page starts (its `after`); `None` after the last.
    pub next: Option<String>,
}

/// The watchlists' figures for `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Figures {
    /// Watchlists of every key.
    pub watchlists: usize,
    /// Distinct addresses in at least one.
    pub addresses: usize,
    /// Changes the index keeps for views before them.
    pub unsettled: usize,
    /// The last edit's number.
    pub edits: Seq,
}

/// What a change did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Applied {
    pub name: String,
    /// How many addresses it holds now.
    pub size: usize,
    /// How many joined and left (addresses already in, or not in, are no
    /// change).
    pub added: usize,
    pub removed: usize,
    /// The edit's number: every edit of this server has a greater one than
    /// those applied before it.
    pub edit: Seq,
}

/// One watchlist as the service holds it.
#[derive(Clone, Debug)]
struct Entry {
    handle: Handle,
    record: ListRecord,
    size: usize,
}

/// Every watchlist, by owner then name.
#[derive(Debug, Default)]
struct Registry {
    by_owner: BTreeMap<String, BTreeMap<String, Entry>>,
    next_handle: Handle,
}

impl Registry {
    /// Files `entry` under its owner and name.
    fn insert(&mut self, entry: Entry) {
        self.by_owner
            .entry(entry.record.owner.clone())
            .or_default()
            .insert(entry.record.name.clone(), entry);
    }

    fn entry(&self, owner: &str, name: &str) -> Result<&Entry, WatchlistError> {
        self.by_owner
            .get(owner)
            .and_then(|lists| lists.get(name))
            .ok_or_else(|| WatchlistError::NotFound(name.to_string()))
    }
}

/// A change for the editor.
#[derive(Debug)]
enum Edit {
    Create { addresses: Vec<Address> },
    Existing(Changing),
}

/// A change of a watchlist that exists.
#[derive(Debug)]
enum Changing {
    Add(Vec<Address>),
    Remove(Vec<Address>),
    Clear,
    Delete,
}

#[derive(Debug)]
struct Request {
    owner: String,
    name: String,
    edit: Edit,
    most: Option<Most>,
    reply: oneshot::Sender<Result<Applied, WatchlistError>>,
}

/// What the service and its editor share.
#[derive(Debug)]
struct Shared {
    /// Read by every filter actor once per batch it matches; written by
    /// the editor once per edit. Never held across an await.
    index: Arc<RwLock<Index>>,
    /// Read by the calls that list and inspect; written by the editor.
    /// Never held across an await.
    registry: RwLock<Registry>,
    store: Arc<dyn WatchlistStore>,
    /// The store's journal since its last snapshot, in bytes: written by
    /// the editor alone (an atomic only to be shared).
    journal_bytes: AtomicU64,
    /// The views the chains hold: the index keeps what the oldest needs.
    views: Arc<Views>,
    /// The last edit applied, for the chains to place in their streams.
    committed: watch::Sender<Seq>,
}

/// The watchlists of every key.
#[derive(Debug)]
pub struct Watchlists {
    shared: Arc<Shared>,
    /// The editor's queue: one change at a time, in order, so the checks
    /// and the numbering see every change before it.
    edits: mpsc::Sender<Request>,
}

impl Watchlists {
    /// Loads every watchlist from `store` and starts the editor on `tasks`,
    /// until `stop` (the change in hand is finished first).
    pub async fn start(
        store: Arc<dyn WatchlistStore>,
        tasks: &Tasks,
        queues: &Queues,
        stop: CancellationToken,
    ) -> anyhow::Result<Arc<Self>> {
        use anyhow::Context as _;
        let loaded = store.load().await.context("loading the watchlists")?;
        let mut registry = Registry {
            next_handle: loaded.next_handle.max(1),
            ..Registry::default()
        };
        let sizes = loaded.index.by_handle();
        for (handle, record) in loaded.lists {
            let size = sizes.get(&handle).map_or(0, Vec::len);
            registry.insert(Entry {
                handle,
                record,
                size,
            });
        }
        let committed = watch::Sender::new(loaded.index.seq());
        let index = Arc::new(RwLock::new(loaded.index));
        let shared = Arc::new(Shared {
            views: Arc::new(Views::new(index.clone())),
            committed,
            index,
            registry: RwLock::new(registry),
            store,
            journal_bytes: AtomicU64::new(loaded.journal_bytes),
        });
        let (edits, requests) = queues.channel(PART.to_string().as_str(), "edits", EDIT_QUEUE);
        tasks.critical(
            "watchlist editor",
            PART,
            edit(shared.clone(), requests, stop),
        );
        Ok(Arc::new(Self { shared, edits }))
    }

    /// The index, to look addresses up in (hold it for one batch, never
    /// across an await).
    pub fn index(&self) -> RwLockReadGuard<'_, Index> {
        self.shared
            .index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// What `/metrics` reports of them.
    pub fn figures(&self) -> Figures {
        let watchlists = self.registry().by_owner.values().map(BTreeMap::len).sum();
        let index = self.index();
        Figures {
            watchlists,
            addresses: index.addresses(),
            unsettled: index.unsettled(),
            edits: index.seq(),
        }
    }

    /// A view of the watchlists as of `edit` (see [`views`]).
    pub fn view(&self, edit: Seq) -> View {
        self.shared.views.view(edit)
    }

    /// The last edit applied, as it changes: each chain places it in its
    /// stream (docs/src/watchlists.md, Where an edit applies).
    pub fn edits(&self) -> watch::Receiver<Seq> {
        self.shared.committed.subscribe()
    }

    /// `owner`'s watchlist `name`'s handle, for a subscription that names it.
    pub fn handle_of(&self, owner: &str, name: &str) -> Result<Handle, WatchlistError> {
        Ok(self.registry().entry(owner, name)?.handle)
    }

    /// `owner`'s watchlists, by name.
    pub fn list(&self, owner: &str) -> Vec<Summary> {
        self.registry()
            .by_owner
            .get(owner)
            .map(|lists| lists.values().map(summary).collect())
            .unwrap_or_default()
    }

    pub fn get(&self, owner: &str, name: &str) -> Result<Summary, WatchlistError> {
        Ok(summary(self.registry().entry(owner, name)?))
    }

    /// The watchlist with a page of its addresses: up to `limit` (1 to
    /// [`MAX_PAGE`]) after `after`, in byte order.
    pub fn inspect(
        &self,
        owner: &str,
        name: &str,
        after: Option<Address>,
        limit: usize,
    ) -> Result<Inspection, WatchlistError> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(WatchlistError::Invalid(format!(
                "limit is a number from 1 to {MAX_PAGE}, got {limit}"
            )));
        }
        let registry = self.registry();
        let entry = registry.entry(owner, name)?;
        let index = self.index();
        let mut page: Vec<Address> = index
            .members_of(entry.handle, index.seq())
            .into_iter()
            .filter(|address| after.is_none_or(|after| *address > after))
            .collect();
        drop(index);
        let more = page.len() > limit;
        if more {
            page.select_nth_unstable(limit);
            page.truncate(limit);
        }
        page.sort_unstable();
        let hex = |address: &Address| format!("0x{}", alloy_primitives::hex::encode(address));
        Ok(Inspection {
            summary: summary(entry),
            next: page.last().filter(|_| more).map(hex),
            addresses: page.iter().map(hex).collect(),
        })
    }

    /// Makes `owner`'s watchlist `name` with `addresses` in it.
    pub async fn create(
        &self,
        owner: &str,
        name: &str,
        addresses: Vec<Address>,
        most: Most,
    ) -> Result<Applied, WatchlistError> {
        if !chainsieve_config::is_plain_name(name) {
            return Err(WatchlistError::Invalid(format!(
                "a watchlist's name is 1 to 64 letters, digits, '_' or '-', got \"{name}\""
            )));
        }
        self.ask(owner, name, Edit::Create { addresses }, Some(most))
            .await
    }

    /// Adds `addresses` to the watchlist, all or none.
    pub async fn add(
        &self,
        owner: &str,
        name: &str,
        addresses: Vec<Address>,
        most: Most,
    ) -> Result<Applied, WatchlistError> {
        self.ask(
            owner,
            name,
            Edit::Existing(Changing::Add(addresses)),
            Some(most),
        )
        .await
    }

    /// Removes `addresses` from the watchlist.
    pub async fn remove(
        &self,
        owner: &str,
        name: &str,
        addresses: Vec<Address>,
    ) -> Result<Applied, WatchlistError> {
        self.ask(
            owner,
            name,
            Edit::Existing(Changing::Remove(addresses)),
            None,
        )
        .await
    }

    /// Empties the watchlist.
    pub async fn clear(&self, owner: &str, name: &str) -> Result<Applied, WatchlistError> {
        self.ask(owner, name, Edit::Existing(Changing::Clear), None)
            .await
    }

    /// Removes the watchlist (a subscription that names it matches none of
    /// its addresses from then on).
    pub async fn delete(&self, owner: &str, name: &str) -> Result<Applied, WatchlistError> {
        self.ask(owner, name, Edit::Existing(Changing::Delete), None)
            .await
    }

    async fn ask(
        &self,
        owner: &str,
        name: &str,
        edit: Edit,
        most: Option<Most>,
    ) -> Result<Applied, WatchlistError> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            owner: owner.to_string(),
            name: name.to_string(),
            edit,
            most,
            reply,
        };
        self.edits
            .send(request)
            .await
            .map_err(|_| WatchlistError::Stopped)?;
        answer.await.map_err(|_| WatchlistError::Stopped)?
    }

    fn registry(&self) -> RwLockReadGuard<'_, Registry> {
        self.shared
            .registry
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn summary(entry: &Entry) -> Summary {
    Summary {
        name: entry.record.name.clone(),
        size: entry.size,
        created: entry.record.created,
        updated: entry.record.updated,
    }
}

/// The editor: one change at a time, checked, committed, then applied.
async fn edit(
    shared: Arc<Shared>,
    mut requests: mpsc::Receiver<Request>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    // What every view has passed is forgotten after each edit and, as
    // views move on between edits, every second.
    let mut tidy = tokio::time::interval(SETTLE_EVERY);
    tidy.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let request = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = tidy.tick() => {
                shared.settle();
                continue;
            }
            request = requests.recv() => request,
        };
        let Some(request) = request else {
            return Ok(());
        };
        let Request {
            owner,
            name,
            edit,
            most,
            reply,
        } = request;
        let answer = shared.apply(owner, name, edit, most).await;
        if let Ok(applied) = &answer {
            shared.committed.send_replace(applied.edit);
        }
        shared.settle();
        // A caller that went away still had its change made.
        let _ = reply.send(answer);
    }
}

impl Shared {
    async fn apply(
        &self,
        owner: String,
        name: String,
        edit: Edit,
        most: Option<Most>,
    ) -> Result<Applied, WatchlistError> {
        let now = unix_now();
        let seq = self.read_index().seq() + 1;
        // What the change is, checked against the limits and the index as
        // they are (only this task changes them).
        let (handle, size, change) = self.plan(&owner, &name, edit, most.as_ref(), now)?;
        let (joined, left) = match &change {
            Change::Create { joined, .. } => (joined.clone(), Vec::new()),
            Change::Edit { joined, left, .. } => (joined.clone(), left.clone()),
            Change::Delete => (Vec::new(), self.read_index().members_of(handle, seq - 1)),
        };
        let (created, deleting) = match &change {
            Change::Create { record, .. } => (Some(record.clone()), false),
            Change::Edit { .. } => (None, false),
            Change::Delete => (None, true),
        };
        let written = self
            .store
            .commit(seq, handle, change)
            .await
            .map_err(WatchlistError::Store)?;
        let (added, removed) = self
            .index
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .apply(seq, handle, &joined, &left);
        {
            let mut registry = self
                .registry
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(record) = created {
                registry.next_handle = handle + 1;
                registry.insert(Entry {
                    handle,
                    record,
                    size,
                });
            } else if deleting {
                if let Some(lists) = registry.by_owner.get_mut(&owner) {
                    lists.remove(&name);
                    if lists.is_empty() {
                        registry.by_owner.remove(&owner);
                    }
                }
            } else if let Some(entry) = registry
                .by_owner
                .get_mut(&owner)
                .and_then(|lists| lists.get_mut(&name))
            {
                entry.size = size;
                entry.record.updated = now;
            }
        }
        self.compact_if_due(seq, written).await;
        Ok(Applied {
            name,
            size,
            added,
            removed,
            edit: seq,
        })
    }

    /// What `edit` of `owner`'s `name` changes, and the watchlist's size
    /// after it; refused whole if it passes a limit.
    fn plan(
        &self,
        owner: &str,
        name: &str,
        edit: Edit,
        most: Option<&Most>,
        now: u64,
    ) -> Result<(Handle, usize, Change), WatchlistError> {
        let registry = self.registry.read().unwrap_or_else(PoisonError::into_inner);
        let index = self.read_index();
        let latest = index.seq();
        let changing = match edit {
            Edit::Existing(changing) => changing,
            Edit::Create { addresses } => {
                let held = registry.by_owner.get(owner).map_or(0, BTreeMap::len);
                if registry.entry(owner, name).is_ok() {
                    return Err(WatchlistError::Exists(name.to_string()));
                }
                if let Some(most) = most
                    && held >= most.watchlists
                {
                    return Err(WatchlistError::Limit(format!(
                        "watchlist limit reached: this API key has {held} watchlists, the most its plan \"{}\" allows ({}); delete one first",
                        most.plan, most.watchlists_origin
                    )));
                }
                let joined = distinct(addresses);
                check_size(name, joined.len(), most)?;
                let record = ListRecord {
                    owner: owner.to_string(),
                    name: name.to_string(),
                    created: now,
                    updated: now,
                };
                let size = joined.len();
                return Ok((
                    registry.next_handle,
                    size,
                    Change::Create { record, joined },
                ));
            }
        };
        let entry = registry.entry(owner, name)?;
        let handle = entry.handle;
        let edited = |joined: Vec<Address>, left: Vec<Address>| Change::Edit {
            updated: now,
            joined,
            left,
        };
        Ok(match changing {
            Changing::Add(addresses) => {
                let joined: Vec<Address> = distinct(addresses)
                    .into_iter()
                    .filter(|a| !index.contains(handle, a, latest))
                    .collect();
                let size = entry.size + joined.len();
                check_size(name, size, most)?;
                (handle, size, edited(joined, Vec::new()))
            }
            Changing::Remove(addresses) => {
                let left: Vec<Address> = distinct(addresses)
                    .into_iter()
                    .filter(|a| index.contains(handle, a, latest))
                    .collect();
                (handle, entry.size - left.len(), edited(Vec::new(), left))
            }
            Changing::Clear => (
                handle,
                0,
                edited(Vec::new(), index.members_of(handle, latest)),
            ),
            Changing::Delete => (handle, 0, Change::Delete),
        })
    }

    /// Once the journal outweighs what it describes (twice the addresses
    /// it holds, and 8 MB), writes a snapshot in its place. A failed one
    /// leaves the journal as it was: it is tried again after the next
    /// edit.
    async fn compact_if_due(&self, seq: Seq, written: u64) {
        let journal = self.journal_bytes.fetch_add(written, Ordering::Relaxed) + written;
        let live = 20 * self.read_index().addresses() as u64;
        if !compaction_due(journal, live) {
            return;
        }
        let members = self.read_index().by_handle().into_iter().collect();
        match self.store.compact(seq, members).await {
            Ok(()) => self.journal_bytes.store(0, Ordering::Relaxed),
            Err(error) => {
                tracing::error!(
                    error = format!("{error:#}"),
                    "compacting the watchlists failed; the journal goes on"
                )
            }
        }
    }

    /// Forgets the flips every view has passed.
    fn settle(&self) {
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        if index.unsettled() > 0 {
            let latest = index.seq();
            index.settle(
                self.views
                    .oldest()
                    .map_or(latest, |oldest| oldest.min(latest)),
            );
        }
    }

    fn read_index(&self) -> RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether a journal of `journal` bytes should give way to a snapshot of
/// `live` bytes of addresses: once it is twice their size and 8 MB, so a
/// watchlist filled once is never rewritten, and one that churns is
/// rewritten after twice its size in edits.
fn compaction_due(journal: u64, live: u64) -> bool {
    journal > (2 * live).max(8 << 20)
}

/// `0x` and 40 hex digits, any case.
pub fn parse_address(text: &str) -> Option<Address> {
    let digits = text.strip_prefix("0x")?;
    let mut address = [0u8; 20];
    (digits.len() == 40)
        .then(|| alloy_primitives::hex::decode_to_slice(digits, &mut address).ok())
        .flatten()
        .map(|()| address)
}

/// `addresses` without repeats, in their first order.
fn distinct(addresses: Vec<Address>) -> Vec<Address> {
    let mut seen = chainsieve_filter_core::KeySet::default();
    addresses.into_iter().filter(|a| seen.insert(*a)).collect()
}

fn check_size(name: &str, size: usize, most: Option<&Most>) -> Result<(), WatchlistError> {
    match most {
        Some(most) if size > most.addresses => Err(WatchlistError::Limit(format!(
            "watchlist \"{name}\" would hold {size} addresses, more than its plan \"{}\" allows ({}, {}); nothing was changed",
            most.plan, most.addresses, most.addresses_origin
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
