//! What the admin API does with keys (docs/src/operations.md, Keys and
//! plans): make one (its secret shown once), change its plan or grants,
//! revoke it; each change written to the store over the revision read,
//! and taken here at once (other servers take it from the store).

use std::sync::Arc;

use serde_json::{Value, json};

use super::record::{Record, digest, new_id, new_secret};
use super::store::PutError;
use super::{Key, Keys};
use chainsieve_config::{DEFAULT_PLAN, check_chains, check_methods};
use chainsieve_runtime::clock::unix_now;

/// A new key's settings.
#[derive(Debug, Default)]
pub struct Create {
    pub name: Option<String>,
    pub plan: Option<String>,
    pub chains: Option<Vec<String>>,
    pub methods: Option<Vec<String>>,
    pub expires_at: Option<u64>,
}

/// What changes of a key: `None` leaves a field, `Some(None)` clears it.
#[derive(Debug, Default)]
pub struct Update {
    pub name: Option<Option<String>>,
    pub plan: Option<String>,
    pub chains: Option<Option<Vec<String>>>,
    pub methods: Option<Option<Vec<String>>>,
    pub expires_at: Option<Option<u64>>,
}

/// Why an admin request about keys did nothing.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{0}")]
    Invalid(String),
    #[error("no key {0}")]
    NotFound(String),
    /// A key of `[auth] keys`, or a revoked one: it cannot change.
    #[error("{0}")]
    Fixed(String),
    #[error("key {0} changed meanwhile (on another server?); read it and try again")]
    Conflict(String),
    #[error("{0:#}")]
    Failed(anyhow::Error),
}

/// Tries to draw an id not taken before giving up (48 random bits: a
/// clash is already rare).
const ID_DRAWS: usize = 4;

impl Keys {
    /// Makes a key; answers its view with the secret, shown this once.
    pub async fn create(&self, request: Create) -> Result<Value, KeyError> {
        let plan = request.plan.unwrap_or_else(|| DEFAULT_PLAN.into());
        let secret = new_secret();
        let mut record = Record {
            id: String::new(),
            digest: digest(&secret),
            name: request.name,
            plan,
            chains: request.chains,
            methods: request.methods,
            expires_at: request.expires_at,
            created_at: unix_now(),
            revoked_at: None,
        };
        self.check(&record)?;
        for _ in 0..ID_DRAWS {
            record.id = new_id();
            match self.store.put(record.clone(), 0).await {
                Ok(revision) => {
                    self.apply(record.clone(), revision);
                    let mut view = view_of(&record, false);
                    view["key"] = secret.into();
                    return Ok(view);
                }
                Err(PutError::Conflict) => continue,
                Err(PutError::Failed(error)) => {
                    return Err(KeyError::Failed(error.context("storing the new key")));
                }
            }
        }
        Err(KeyError::Failed(anyhow::anyhow!(
            "no free key id in {ID_DRAWS} draws"
        )))
    }

    /// Changes what `update` names of key `id`.
    pub async fn update(&self, id: &str, update: Update) -> Result<Value, KeyError> {
        let _writing = self.writing.lock().await;
        let (key, mut record, revision) = self.managed(id, "changed")?;
        if let Some(name) = update.name {
            record.name = name;
        }
        if let Some(plan) = update.plan {
            record.plan = plan;
        }
        if let Some(chains) = update.chains {
            record.chains = chains;
        }
        if let Some(methods) = update.methods {
            record.methods = methods;
        }
        if let Some(expires_at) = update.expires_at {
            record.expires_at = expires_at;
        }
        self.check(&record)?;
        self.write_over(&key, record, revision).await
    }

    /// Revokes key `id`: from now on it is refused, and its sessions
    /// close. Revoking a revoked key changes nothing.
    pub async fn revoke(&self, id: &str) -> Result<Value, KeyError> {
        let _writing = self.writing.lock().await;
        let key = self.configurable(id)?;
        let grant = key.grant();
        if grant.record.revoked_at.is_some() {
            return Ok(view_of(&grant.record, false));
        }
        let mut record = grant.record.clone();
        record.revoked_at = Some(unix_now());
        self.write_over(&key, record, grant.revision).await
    }

    /// Every key's view.
    pub fn list(&self) -> Vec<Value> {
        self.all()
            .iter()
            .map(|key| view_of(&key.grant().record, key.configured))
            .collect()
    }

    pub fn view(&self, id: &str) -> Result<Value, KeyError> {
        let key = self
            .by_id(id)
            .ok_or_else(|| KeyError::NotFound(id.into()))?;
        Ok(view_of(&key.grant().record, key.configured))
    }

    /// Key `id`, if the API manages it.
    fn configurable(&self, id: &str) -> Result<Arc<Key>, KeyError> {
        let key = self
            .by_id(id)
            .ok_or_else(|| KeyError::NotFound(id.into()))?;
        if key.configured {
            return Err(KeyError::Fixed(format!(
                "key {id} is configured in [auth] keys: change it there and restart"
            )));
        }
        Ok(key)
    }

    /// Key `id` with its record and revision, if it may still change.
    fn managed(&self, id: &str, what: &str) -> Result<(Arc<Key>, Record, u64), KeyError> {
        let key = self.configurable(id)?;
        let grant = key.grant();
        if grant.record.revoked_at.is_some() {
            return Err(KeyError::Fixed(format!(
                "key {id} is revoked: it cannot be {what}; make a new one"
            )));
        }
        Ok((key.clone(), grant.record.clone(), grant.revision))
    }

    async fn write_over(
        &self,
        key: &Key,
        record: Record,
        revision: u64,
    ) -> Result<Value, KeyError> {
        match self.store.put(record.clone(), revision).await {
            Ok(revision) => {
                self.apply(record.clone(), revision);
                Ok(view_of(&record, false))
            }
            Err(PutError::Conflict) => Err(KeyError::Conflict(key.id.to_string())),
            Err(PutError::Failed(error)) => Err(KeyError::Failed(
                error.context(format!("storing key {}", key.id)),
            )),
        }
    }

    /// Checks a record's settings against this server's plans and chains.
    fn check(&self, record: &Record) -> Result<(), KeyError> {
        if let Some(name) = &record.name
            && (name.is_empty() || name.chars().count() > 64)
        {
            return Err(KeyError::Invalid("name must be 1 to 64 characters".into()));
        }
        if self.plans.get(&record.plan).is_none() {
            return Err(KeyError::Invalid(format!(
                "unknown plan \"{}\" (configured: {})",
                record.plan,
                self.plans.names()
            )));
        }
        let invalid = |error: anyhow::Error| KeyError::Invalid(format!("{error:#}"));
        if let Some(chains) = &record.chains {
            check_chains("chains", chains, self.served.iter().map(String::as_str))
                .map_err(invalid)?;
        }
        if let Some(methods) = &record.methods {
            check_methods("methods", methods).map_err(invalid)?;
        }
        if let Some(expiry) = record.expires_at
            && expiry <= unix_now()
        {
            return Err(KeyError::Invalid(format!(
                "expiresAt {expiry} is not in the future (Unix seconds)"
            )));
        }
        Ok(())
    }
}

/// A key as the admin API shows it: never its secret or digest.
fn view_of(record: &Record, configured: bool) -> Value {
    json!({
        "id": record.id,
        "name": record.name,
        "plan": record.plan,
        "chains": record.chains,
        "methods": record.methods,
        "expiresAt": record.expires_at,
        "createdAt": (!configured).then_some(record.created_at),
        "revokedAt": record.revoked_at,
        "source": if configured { "config" } else { "api" },
    })
}
