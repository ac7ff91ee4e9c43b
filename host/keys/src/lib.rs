//! API keys and their plans (docs/src/operations.md, Keys and plans): who
//! may call, what each may do, and keys made, re-planned and revoked
//! while the server runs.
//!
//! - [`record`] — a key as stored: id, the digest of its secret (never the
//!   secret), plan, grants, expiry, revocation;
//! - [`plan`] — the configured plans with the server-wide limits filled in;
//! - [`store`] — where records persist: the embedded database on a server
//!   of role `all`, the bus's KV bucket on the edges (`keys/bus.rs`);
//! - [`manage`] — what the admin API does with them.
//!
//! [`Keys`] holds every key the server accepts: those of `[auth] keys`
//! (or the demo key) and the managed ones, followed as the store reports
//! changes, so a key made or revoked on one edge counts on every edge
//! within a moment. Each [`Key`] publishes its grant as it changes; a
//! WebSocket session waits on it to close when the key is revoked or
//! expires.
//!
//! May use (docs/src/architecture.md, Crates): [`chainsieve_bus`],
//! [`chainsieve_config`], [`chainsieve_runtime`], [`chainsieve_usage`].

pub mod bus;
pub mod manage;
pub mod per_key;
pub mod plan;
pub mod record;
pub mod store;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt as _;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use chainsieve_config::DEFAULT_PLAN;
use chainsieve_runtime::clock::unix_now;
use chainsieve_runtime::tasks::{Part, Tasks};
use chainsieve_usage::Meter;
use plan::{Methods, Plan, Plans, chain_allowed, method_allowed};
use record::{Record, digest};
use store::KeyStore;

/// What one key may do now: its record as last written, and what it
/// allows, worked out once per change rather than at every call.
#[derive(Debug)]
pub struct Grant {
    pub record: Record,
    /// The record's revision in the store (0 for a key of `[auth] keys`).
    pub revision: u64,
    /// `None`: the plan the record names is not configured on this server.
    pub plan: Option<Arc<Plan>>,
    chains: Option<BTreeSet<String>>,
    methods: Option<Methods>,
}

impl Grant {
    fn new(record: Record, revision: u64, plans: &Plans) -> Self {
        Self {
            plan: plans.get(&record.plan).cloned(),
            chains: record
                .chains
                .as_ref()
                .map(|chains| chains.iter().cloned().collect()),
            methods: record.methods.as_deref().map(Methods::new),
            record,
            revision,
        }
    }

    /// Whether the key has ended by `now` (Unix seconds): revoked, or past
    /// its expiry.
    pub fn ended(&self, now: u64) -> Option<Ended> {
        if self.record.revoked_at.is_some() {
            Some(Ended::Revoked)
        } else if self.record.expires_at.is_some_and(|expiry| expiry <= now) {
            Some(Ended::Expired)
        } else {
            None
        }
    }

    /// Why `method` may not be called with this grant, if it may not.
    pub fn method_refusal(&self, plan: &Plan, method: &str) -> Option<String> {
        if !method_allowed(plan.methods.as_ref(), method) {
            let allowed: Vec<&str> = plan.methods.iter().flat_map(Methods::names).collect();
            return Some(format!(
                "{method} is not included in this API key's plan \"{}\" (it allows: {})",
                plan.name,
                allowed.join(", ")
            ));
        }
        if !method_allowed(self.methods.as_ref(), method) {
            let allowed: Vec<&str> = self.methods.iter().flat_map(Methods::names).collect();
            return Some(format!(
                "{method} is not allowed for this API key (it may call: {})",
                allowed.join(", ")
            ));
        }
        None
    }
}

/// Why a key may not be used now.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyRefused {
    #[error("unauthorized: unknown API key")]
    Unknown,
    #[error("unauthorized: this API key was revoked")]
    Revoked,
    #[error("unauthorized: this API key expired")]
    Expired,
    #[error(
        "this API key's plan \"{0}\" is not configured on this server; ask its operator to add [plans.{0}]"
    )]
    NoPlan(String),
    #[error("this API key may not use chain \"{0}\"")]
    Chain(String),
}

/// Why a WebSocket session's key ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Revoked,
    Expired,
}

/// One key the server accepts (or accepted: a revoked key stays, refused).
#[derive(Debug)]
pub struct Key {
    /// Public and stable: what limits, usage and the admin API go by.
    pub id: Arc<str>,
    /// The digest of its secret: who owns the webhooks it makes.
    pub owner: Arc<str>,
    /// A key of `[auth] keys` (or the demo key), not managed by the API.
    pub configured: bool,
    /// What it used since the server started; `None` with `[usage]
    /// enabled = false`.
    pub meter: Option<Arc<Meter>>,
    /// The grant now, replaced at every change; sessions watch it to
    /// close when the key is revoked or expires.
    grant: watch::Sender<Arc<Grant>>,
}

impl Key {
    pub fn grant(&self) -> Arc<Grant> {
        self.grant.borrow().clone()
    }

    /// The grant, if the key may be used on `chain` now, with its plan.
    pub fn admit(&self, chain: &str) -> Result<(Arc<Grant>, Arc<Plan>), KeyRefused> {
        let grant = self.grant();
        match grant.ended(unix_now()) {
            Some(Ended::Revoked) => return Err(KeyRefused::Revoked),
            Some(Ended::Expired) => return Err(KeyRefused::Expired),
            None => {}
        }
        let Some(plan) = grant.plan.clone() else {
            return Err(KeyRefused::NoPlan(grant.record.plan.clone()));
        };
        if !chain_allowed(plan.chains.as_ref(), chain)
            || !chain_allowed(grant.chains.as_ref(), chain)
        {
            return Err(KeyRefused::Chain(chain.to_string()));
        }
        Ok((grant, plan))
    }

    /// Resolves once the key is revoked or reaches its expiry (a changed
    /// expiry counts from its change); never while it stays valid.
    pub async fn ended(&self) -> Ended {
        let mut watching = self.grant.subscribe();
        loop {
            let grant = watching.borrow_and_update().clone();
            if grant.record.revoked_at.is_some() {
                return Ended::Revoked;
            }
            let expiry = grant.record.expires_at.map(until);
            tokio::select! {
                changed = watching.changed() => {
                    if changed.is_err() {
                        // The registry is gone (shutdown): nothing ends it.
                        std::future::pending::<()>().await;
                    }
                }
                () = tokio::time::sleep(expiry.unwrap_or_default()), if expiry.is_some() => {
                    return Ended::Expired;
                }
            }
        }
    }
}

/// The time left until Unix second `at` (zero if past).
fn until(at: u64) -> Duration {
    (UNIX_EPOCH + Duration::from_secs(at))
        .duration_since(SystemTime::now())
        .unwrap_or_default()
}

/// Every key, by id and by the digest of its secret.
#[derive(Debug, Default)]
struct Known {
    by_id: BTreeMap<Arc<str>, Arc<Key>>,
    by_digest: HashMap<Arc<str>, Arc<Key>>,
}

/// The keys the server accepts.
#[derive(Debug)]
pub struct Keys {
    plans: Plans,
    /// The chains this server serves, for grants that name chains.
    served: Vec<String>,
    store: Arc<dyn KeyStore>,
    /// Whether keys count their usage.
    metering: bool,
    /// Read at every HTTP request and WebSocket upgrade, written at a
    /// change: short critical sections only.
    known: RwLock<Known>,
    /// The admin API's writes, one at a time in this process: each reads
    /// a record, changes it and writes it over the revision it read.
    writing: tokio::sync::Mutex<()>,
}

impl Keys {
    /// The keys of `configured` (each `config-<n>` by its place, the demo
    /// key `demo`) and those `store` holds; follows the store's changes on
    /// `tasks` until `shutdown`.
    pub async fn start(
        plans: Plans,
        served: Vec<String>,
        configured: &[String],
        metering: bool,
        store: Arc<dyn KeyStore>,
        tasks: &Tasks,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Arc<Self>> {
        let keys = Arc::new(Self {
            plans,
            served,
            store,
            metering,
            known: RwLock::default(),
            writing: tokio::sync::Mutex::new(()),
        });
        for (place, secret) in configured.iter().enumerate() {
            let id = if secret == chainsieve_config::DEMO_KEY {
                secret.clone()
            } else {
                format!("config-{}", place + 1)
            };
            keys.insert(
                &Record {
                    id,
                    digest: digest(secret),
                    name: None,
                    plan: DEFAULT_PLAN.into(),
                    chains: None,
                    methods: None,
                    expires_at: None,
                    created_at: 0,
                    revoked_at: None,
                },
                0,
                true,
            );
        }
        // Watched before loading: a change made in between is not missed
        // (applying a record twice is harmless).
        let mut changes = keys.store.changes();
        for (record, revision) in keys.store.load().await? {
            keys.apply(record, revision);
        }
        let following = keys.clone();
        // Without it a key revoked elsewhere would go on being accepted
        // here: the server cannot serve without it.
        tasks.critical("keys follower", Part::Service("keys"), async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    change = changes.next() => match change {
                        Some((record, revision)) => following.apply(record, revision),
                        None => anyhow::bail!("the keys' change feed ended"),
                    },
                }
            }
        });
        Ok(keys)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        self.known
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Known> {
        self.known
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The key whose secret is `secret`.
    pub fn find(&self, secret: &str) -> Result<Arc<Key>, KeyRefused> {
        self.read()
            .by_digest
            .get(digest(secret).as_str())
            .cloned()
            .ok_or(KeyRefused::Unknown)
    }

    pub fn by_id(&self, id: &str) -> Option<Arc<Key>> {
        self.read().by_id.get(id).cloned()
    }

    /// Every key, in id order.
    pub fn all(&self) -> Vec<Arc<Key>> {
        self.read().by_id.values().cloned().collect()
    }

    /// The id, plan and meter of the key whose secret has digest `owner`
    /// (what its webhooks count under); the digest itself, the default
    /// plan and no meter for a key this server does not know, or whose
    /// plan it lacks.
    pub fn plan_of(&self, owner: &str) -> (Arc<str>, Arc<Plan>, Option<Arc<Meter>>) {
        let known = self.read().by_digest.get(owner).cloned();
        known
            .and_then(|key| Some((key.id.clone(), key.grant().plan.clone()?, key.meter.clone())))
            .unwrap_or_else(|| (owner.into(), self.plans.default_plan().clone(), None))
    }

    /// Why the key whose secret has digest `owner` is no longer in use
    /// (revoked or expired), if it is not; none for a key this server
    /// does not know.
    pub fn ended_reason(&self, owner: &str) -> Option<String> {
        let key = self.read().by_digest.get(owner).cloned()?;
        let ended = key.grant().ended(unix_now())?;
        Some(match ended {
            Ended::Revoked => format!("its API key {} was revoked", key.id),
            Ended::Expired => format!("its API key {} expired", key.id),
        })
    }

    /// The meter of the key whose secret has digest `owner`.
    pub fn meter_of(&self, owner: &str) -> Option<Arc<Meter>> {
        self.read().by_digest.get(owner)?.meter.clone()
    }

    /// Every key's meter, by key id (for the ledger and `/metrics`).
    pub fn meters(&self) -> Vec<(Arc<str>, Arc<Meter>)> {
        self.read()
            .by_id
            .values()
            .filter_map(|key| Some((key.id.clone(), key.meter.clone()?)))
            .collect()
    }

    /// The key of `record`'s id: the one known, or one made of `record` at
    /// `revision` (of `[auth] keys` if `configured`), in one step under the
    /// lock, so two appliers never make two.
    fn insert(&self, record: &Record, revision: u64, configured: bool) -> Arc<Key> {
        let mut known = self.write();
        if let Some(key) = known.by_id.get(record.id.as_str()) {
            return key.clone();
        }
        let key = Arc::new(Key {
            id: record.id.as_str().into(),
            owner: record.digest.as_str().into(),
            configured,
            meter: self.metering.then(Arc::default),
            grant: watch::Sender::new(Arc::new(Grant::new(record.clone(), revision, &self.plans))),
        });
        known.by_digest.insert(key.owner.clone(), key.clone());
        known.by_id.insert(key.id.clone(), key.clone());
        key
    }

    /// Takes `record` at `revision` unless an equal or later one is known
    /// (the follower and the admin API may apply one key at once: the
    /// check and the change are one step under the grant's lock).
    fn apply(&self, record: Record, revision: u64) {
        let key = self.insert(&record, revision, false);
        if key.configured {
            tracing::warn!(key = %key.id, "a stored key has the id of a configured key; ignored");
            return;
        }
        key.grant.send_if_modified(|grant| {
            let newer = grant.revision < revision;
            if newer {
                *grant = Arc::new(Grant::new(record, revision, &self.plans));
            }
            newer
        });
    }
}

#[cfg(test)]
mod tests;
