//! The registry without sockets: keys made, found, re-planned, revoked and
//! expired; a change another server wrote taken from the store.

use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use tokio::sync::mpsc;

use super::manage::{Create, KeyError, Update};
use super::store::{EmbeddedKeys, PutError, tests::record};
use super::*;
use chainsieve_config::{Config, PlanConfig};

/// The embedded store, plus changes "another server" writes.
#[derive(Debug)]
struct Shared {
    local: EmbeddedKeys,
    changes: Mutex<Option<mpsc::UnboundedReceiver<(Record, u64)>>>,
}

impl KeyStore for Shared {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<Vec<(Record, u64)>>> {
        self.local.load()
    }

    fn changes(&self) -> BoxStream<'static, (Record, u64)> {
        let taken = self
            .changes
            .lock()
            .expect("lock")
            .take()
            .expect("changes taken once");
        Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(taken))
    }

    fn put(&self, record: Record, expected: u64) -> BoxFuture<'_, Result<u64, PutError>> {
        self.local.put(record, expected)
    }
}

fn plans() -> Plans {
    let mut config = Config::default();
    config.limits.requests_per_second_per_key = 100;
    config.plans.insert(
        "free".into(),
        PlanConfig {
            requests_per_second: Some(2),
            chains: Some(vec!["eth".into()]),
            methods: Some(vec!["eth".into()]),
            ..PlanConfig::default()
        },
    );
    Plans::from_config(&config)
}

async fn keys(configured: &[&str]) -> (Arc<Keys>, mpsc::UnboundedSender<(Record, u64)>) {
    let (others, changes) = mpsc::unbounded_channel();
    let store = Shared {
        local: EmbeddedKeys::open(None).expect("store"),
        changes: Mutex::new(Some(changes)),
    };
    let keys = Keys::start(
        plans(),
        vec!["eth".into(), "bsc".into()],
        &configured.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        true,
        Arc::new(store),
        &chainsieve_runtime::tasks::Tasks::new(CancellationToken::new()),
        CancellationToken::new(),
    )
    .await
    .expect("keys");
    (keys, others)
}

fn secret_of(view: &serde_json::Value) -> String {
    view["key"].as_str().expect("the secret, once").to_string()
}

#[tokio::test]
async fn configured_keys_are_found_by_secret_and_fixed() {
    let (keys, _) = keys(&["alpha", "demo"]).await;
    let alpha = keys.find("alpha").expect("configured");
    assert_eq!(&*alpha.id, "config-1");
    assert_eq!(&*alpha.owner, digest("alpha"));
    assert_eq!(&*keys.find("demo").expect("demo").id, "demo");
    assert_eq!(keys.find("beta").expect_err("unknown"), KeyRefused::Unknown);
    let (_, plan) = alpha.admit("bsc").expect("every chain");
    assert_eq!(&*plan.name, DEFAULT_PLAN);
    assert!(matches!(
        keys.revoke("config-1").await,
        Err(KeyError::Fixed(message)) if message.contains("[auth] keys")
    ));
    let listed = keys.list();
    assert_eq!(listed[0]["source"], "config");
    assert!(!listed[0].to_string().contains("alpha"), "no secret shown");
}

#[tokio::test]
async fn a_key_is_made_re_planned_and_revoked() {
    let (keys, _) = keys(&[]).await;
    let view = keys
        .create(Create {
            name: Some("bots".into()),
            ..Create::default()
        })
        .await
        .expect("created");
    let secret = secret_of(&view);
    let id = view["id"].as_str().expect("id");
    let key = keys.find(&secret).expect("found by its secret");
    assert_eq!(&*key.id, id);
    assert!(key.grant().record.digest != secret, "stored as a digest");
    assert!(keys.view(id).expect("view").get("key").is_none());
    key.admit("bsc")
        .expect("the default plan serves every chain");

    let changed = keys
        .update(
            id,
            Update {
                plan: Some("free".into()),
                ..Update::default()
            },
        )
        .await
        .expect("re-planned");
    assert_eq!(changed["plan"], "free");
    assert_eq!(
        key.admit("bsc").expect_err("free is eth only"),
        KeyRefused::Chain("bsc".into())
    );
    let (grant, plan) = key.admit("eth").expect("eth");
    assert_eq!(plan.requests_per_second.get(), 2);
    let refused = grant.method_refusal(&plan, "token_price").expect("refused");
    assert!(refused.contains("plan \"free\""), "{refused}");
    assert_eq!(grant.method_refusal(&plan, "eth_subscribe"), None);

    let mut ended = Box::pin(async { key.ended().await });
    assert!(futures_util::poll!(&mut ended).is_pending());
    let revoked = keys.revoke(id).await.expect("revoked");
    assert!(revoked["revokedAt"].is_u64());
    assert_eq!(ended.await, Ended::Revoked);
    assert_eq!(key.admit("eth").expect_err("revoked"), KeyRefused::Revoked);
    assert!(matches!(
        keys.update(id, Update::default()).await,
        Err(KeyError::Fixed(_))
    ));
    assert_eq!(
        keys.revoke(id).await.expect("again")["revokedAt"],
        revoked["revokedAt"]
    );
}

#[tokio::test]
async fn bad_settings_are_refused_with_the_reason() {
    let (keys, _) = keys(&[]).await;
    for (create, expected) in [
        (
            Create {
                plan: Some("gold".into()),
                ..Create::default()
            },
            "unknown plan \"gold\" (configured: default, free)",
        ),
        (
            Create {
                chains: Some(vec!["base".into()]),
                ..Create::default()
            },
            "chains names \"base\", which is not served (served: eth, bsc)",
        ),
        (
            Create {
                expires_at: Some(1),
                ..Create::default()
            },
            "expiresAt 1 is not in the future",
        ),
        (
            Create {
                name: Some(String::new()),
                ..Create::default()
            },
            "name must be 1 to 64 characters",
        ),
    ] {
        let error = keys.create(create).await.expect_err(expected).to_string();
        assert!(error.contains(expected), "{error}");
    }
    assert!(matches!(
        keys.update("key_none", Update::default()).await,
        Err(KeyError::NotFound(_))
    ));
    assert!(keys.list().is_empty(), "nothing made");
}

#[tokio::test(start_paused = true)]
async fn a_key_expires_and_its_sessions_end() {
    let (keys, _) = keys(&[]).await;
    let view = keys
        .create(Create {
            expires_at: Some(unix_now() + 3_600),
            ..Create::default()
        })
        .await
        .expect("created");
    let key = keys.find(&secret_of(&view)).expect("found");
    key.admit("eth").expect("not yet expired");
    // Paused time: the hour passes at once.
    assert_eq!(key.ended().await, Ended::Expired);
}

/// The key of `secret` once the follower has taken it from the store.
async fn taken(keys: &Keys, secret: &str) -> Arc<Key> {
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Ok(key) = keys.find(secret) {
                return key;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("taken from the store's changes")
}

#[tokio::test]
async fn a_change_another_server_wrote_is_taken_and_older_ones_are_not() {
    let (keys, others) = keys(&[]).await;
    others.send((record("key_b", "other"), 1)).expect("send");
    let key = taken(&keys, "other").await;
    let mut revoked = record("key_b", "other");
    revoked.revoked_at = Some(9);
    let mut ended = Box::pin(async { key.ended().await });
    others.send((revoked, 2)).expect("send");
    others.send((record("key_b", "other"), 1)).expect("send");
    assert_eq!(ended.as_mut().await, Ended::Revoked);
    // Changes are taken in order: once a later one is in, so is the stale one.
    others.send((record("key_c", "marker"), 1)).expect("send");
    taken(&keys, "marker").await;
    assert_eq!(
        key.admit("eth")
            .expect_err("an older revision does not undo it"),
        KeyRefused::Revoked
    );
}
