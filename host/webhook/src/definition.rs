//! What a webhook is (its owner's definition) and how far it got (its
//! progress, written by whoever delivers it); both persist, apart, so the
//! API's writes and the deliverer's never touch the same record.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A webhook as its owner defined it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Definition {
    /// `0x` + 32 hex digits; also the `subscription` of every notification
    /// it delivers.
    pub id: String,
    /// Whose it is: the digest of the secret of the API key that made it
    /// (`chainsieve_keys::record::digest`; the secret is not kept).
    pub owner: String,
    pub chain: String,
    pub url: String,
    /// `eth_subscribe`'s params: the topic, its params, and the options
    /// object (`fromBlock`, `resumeFrom`, `finality`) if any.
    pub subscribe: Vec<Value>,
    pub batch: Batching,
    /// The HMAC-SHA256 key of its signatures, shown once at creation.
    pub secret: String,
    /// Unix milliseconds.
    pub created_at: u64,
    /// Set by `webhook_pause`, or once it failed for `pause_after_secs`.
    pub paused: Option<Paused>,
}

/// How notifications are grouped into deliveries.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Batching {
    /// The most notifications in one POST.
    pub max_events: usize,
    /// How long a delivery may wait for more notifications once it has
    /// one, in milliseconds (0: it goes with what is there).
    pub max_wait_ms: u64,
}

impl Default for Batching {
    fn default() -> Self {
        Self {
            max_events: 100,
            max_wait_ms: 0,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Paused {
    /// Unix milliseconds.
    pub at: u64,
    pub reason: String,
}

/// How far a webhook got, and what went wrong lately.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// The cursor of the last notification the receiver accepted: where
    /// delivery goes on from (after a restart, on another edge, on resume).
    pub cursor: Option<String>,
    /// The last cursor of the batch being delivered: after a restart, the
    /// first batch ends there again, so it carries the same delivery id.
    pub inflight: Option<String>,
    /// Deliveries accepted (2xx), notifications in them, and tries that
    /// failed.
    pub deliveries: u64,
    pub notifications: u64,
    pub failures: u64,
    /// Unix milliseconds of the last delivery accepted.
    pub last_delivery_at: Option<u64>,
    /// Since when deliveries fail, and why; `None` while they succeed.
    pub trouble: Option<Trouble>,
}

/// A run of failed tries.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Trouble {
    /// `Failing`: the receiver refused (a 4xx other than 408 and 429);
    /// `Retrying`: it could not be reached or asked to be tried again.
    pub kind: TroubleKind,
    /// Unix milliseconds of the first failed try of the run.
    pub since: u64,
    pub last_error: String,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TroubleKind {
    Retrying,
    Failing,
}

/// What `webhook_get` and `webhook_list` say of a webhook's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Active,
    Retrying,
    Failing,
    Paused,
}

impl State {
    pub const ALL: [State; 4] = [
        State::Active,
        State::Retrying,
        State::Failing,
        State::Paused,
    ];

    /// A webhook's state: paused first, then its trouble, else active.
    pub fn of(paused: bool, trouble: Option<TroubleKind>) -> Self {
        match (paused, trouble) {
            (true, _) => State::Paused,
            (false, Some(TroubleKind::Retrying)) => State::Retrying,
            (false, Some(TroubleKind::Failing)) => State::Failing,
            (false, None) => State::Active,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            State::Active => "active",
            State::Retrying => "retrying",
            State::Failing => "failing",
            State::Paused => "paused",
        }
    }
}

/// The topic a definition subscribes to.
pub fn topic(subscribe: &[Value]) -> &str {
    subscribe.first().and_then(Value::as_str).unwrap_or("")
}

/// A webhook as its owner reads it (never its secret).
pub fn view(definition: &Definition, progress: &Progress) -> Value {
    let state = State::of(
        definition.paused.is_some(),
        progress.trouble.as_ref().map(|trouble| trouble.kind),
    );
    let mut view = json!({
        "id": definition.id,
        "chain": definition.chain,
        "url": definition.url,
        "subscribe": definition.subscribe,
        "batch": definition.batch,
        "createdAt": definition.created_at,
        "state": state.name(),
        "cursor": progress.cursor,
        "deliveries": progress.deliveries,
        "notifications": progress.notifications,
        "failures": progress.failures,
        "lastDeliveryAt": progress.last_delivery_at,
    });
    if let Some(trouble) = &progress.trouble {
        view["since"] = json!(trouble.since);
        view["lastError"] = json!(trouble.last_error);
    }
    if let Some(paused) = &definition.paused {
        view["pausedAt"] = json!(paused.at);
        view["pausedReason"] = json!(paused.reason);
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;
    use chainsieve_keys::record::digest;

    fn definition() -> Definition {
        Definition {
            id: "0x01".into(),
            owner: digest("demo"),
            chain: "eth".into(),
            url: "https://example.com/hook".into(),
            subscribe: vec![json!("newHeads")],
            batch: Batching::default(),
            secret: "whsec_x".into(),
            created_at: 1,
            paused: None,
        }
    }

    fn state(definition: &Definition, progress: &Progress) -> State {
        State::of(
            definition.paused.is_some(),
            progress.trouble.as_ref().map(|trouble| trouble.kind),
        )
    }

    #[test]
    fn the_state_is_paused_first_then_the_trouble_then_active() {
        let mut definition = definition();
        let mut progress = Progress::default();
        assert_eq!(state(&definition, &progress), State::Active);
        progress.trouble = Some(Trouble {
            kind: TroubleKind::Failing,
            since: 5,
            last_error: "HTTP 404".into(),
        });
        assert_eq!(state(&definition, &progress), State::Failing);
        let view = view(&definition, &progress);
        assert_eq!(
            (view["since"].as_u64(), view["lastError"].as_str()),
            (Some(5), Some("HTTP 404"))
        );
        definition.paused = Some(Paused {
            at: 9,
            reason: "paused by its owner".into(),
        });
        assert_eq!(state(&definition, &progress), State::Paused);
    }

    #[test]
    fn the_view_never_shows_the_secret_nor_the_key() {
        let view = view(&definition(), &Progress::default()).to_string();
        assert!(
            !view.contains("whsec_x") && !view.contains(&digest("demo")),
            "{view}"
        );
    }
}
