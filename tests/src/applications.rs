//! The Rust applications of the resuming clients' tests: alloy providers
//! in this process, speaking the line protocol of the JavaScript and
//! Python ones (`tests/js/resuming_clients.mjs`, `tests/py/*.py`), so a
//! [`Conversation`](crate::scripts::Conversation) drives each the same way:
//! - `resuming_clients`: newHeads, logs and bvMinedTransactions on
//!   chainsieve-client's `ResumingConnect`, each handler recording the
//!   keys the control computes (`crate::control::key`);
//! - `plain_clients`: the same on alloy's own `WsConnect`, which
//!   reconnects and subscribes again from "now";
//! - `refused_resume`: heads and pending transactions, its error handler
//!   recording each `ResumeRefusedError`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_provider::{Provider, ProviderBuilder, RootProvider, WsConnect};
use alloy_rpc_types_eth::{Filter, Header, Log};
use chainsieve_client::{Backoff, Heartbeat, ResumeRefusedError, ResumingConnect};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

/// Lines to an application, lines from it.
pub type Lines = (
    mpsc::UnboundedReceiver<String>,
    mpsc::UnboundedSender<String>,
);

/// Starts application `name` with `args` (its first the library, as the
/// scripts' are) on this runtime.
pub fn start(name: &str, args: &[&str], lines: Lines) -> tokio::task::JoinHandle<()> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    match name {
        "resuming_clients" => tokio::spawn(follow(args, lines, true)),
        "plain_clients" => tokio::spawn(follow(args, lines, false)),
        "refused_resume" => tokio::spawn(refused_resume(args, lines)),
        _ => panic!("no Rust application {name}"),
    }
}

/// chainsieve-client with the scripts' short delays: the tests cut the
/// connection every few hundred ms.
fn resuming(url: &str) -> ResumingConnect {
    ResumingConnect::new(url)
        .backoff(Backoff {
            initial: Duration::from_millis(20),
            maximum: Duration::from_millis(200),
        })
        .heartbeat(Some(Heartbeat {
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(2),
        }))
}

/// What the handlers recorded, by topic, and the errors they saw.
#[derive(Default)]
struct Got {
    topics: Mutex<serde_json::Map<String, Value>>,
    errors: Mutex<Vec<String>>,
    /// Woken by every handler call.
    changed: Notify,
}

impl Got {
    fn record(&self, topic: &str, key: String) {
        let mut topics = self.topics.lock().expect("the record");
        match topics.entry(topic).or_insert_with(|| json!([])) {
            Value::Array(keys) => keys.push(Value::String(key)),
            _ => unreachable!("arrays only"),
        }
        drop(topics);
        self.changed.notify_waiters();
    }

    fn error(&self, error: String) {
        self.errors.lock().expect("the errors").push(error);
        self.changed.notify_waiters();
    }

    /// Whether every handler has had an event of block `hash`.
    fn has(&self, hash: &str) -> bool {
        let topics = self.topics.lock().expect("the record");
        let keys = |topic: &str| -> Vec<String> {
            topics
                .get(topic)
                .and_then(Value::as_array)
                .map(|keys| {
                    keys.iter()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        keys("newHeads").iter().any(|k| k == hash)
            && keys("logs")
                .iter()
                .any(|k| k.starts_with(&format!("{hash}/")))
            && keys("bvMinedTransactions")
                .iter()
                .any(|k| k.contains(&format!("/{hash}/")))
    }

    async fn until(&self, hash: &str) {
        loop {
            let changed = self.changed.notified();
            if self.has(hash) {
                return;
            }
            changed.await;
        }
    }
}

/// `resuming_clients` (`resumes`) or `plain_clients`: args library, url,
/// contract.
async fn follow(args: Vec<String>, (mut commands, say): Lines, resumes: bool) {
    let (url, contract) = (&args[1], &args[2]);
    let connect = resuming(url);
    let provider: RootProvider = if resumes {
        ProviderBuilder::default()
            .connect_pubsub_with(connect.clone())
            .await
            .expect("connected")
    } else {
        // alloy's own reconnection, with the short delay the plain viem
        // application has too.
        let connect = WsConnect::new(url.as_str())
            .with_max_retries(u32::MAX)
            .with_retry_interval(Duration::from_millis(20));
        ProviderBuilder::default()
            .connect_ws(connect)
            .await
            .expect("connected")
    };
    let got = Arc::new(Got::default());
    let heads = provider.subscribe_blocks().await.expect("newHeads");
    let address: alloy_primitives::Address = contract.parse().expect("an address");
    let logs = provider
        .subscribe_logs(&Filter::new().address(address))
        .await
        .expect("logs");
    let transactions = provider
        .subscribe::<_, Value>(("bvMinedTransactions", json!({ "toAddress": [contract] })))
        .await
        .expect("bvMinedTransactions");
    let mut tasks = tokio::task::JoinSet::new();
    {
        let got = got.clone();
        let mut heads = heads.into_result_stream();
        tasks.spawn(async move {
            while let Some(head) = heads.next().await {
                match head {
                    Ok(head) => {
                        let head: Header = head;
                        got.record("newHeads", head.hash.to_string());
                    }
                    Err(error) => got.error(format!("newHeads: {error}")),
                }
            }
        });
    }
    {
        let got = got.clone();
        let mut logs = logs.into_result_stream();
        tasks.spawn(async move {
            while let Some(log) = logs.next().await {
                match log {
                    Ok(log) => {
                        let log: Log = log;
                        let key = format!(
                            "{}/{}/{}",
                            log.block_hash.map(|h| h.to_string()).unwrap_or_default(),
                            log.log_index.unwrap_or_default(),
                            log.removed
                        );
                        got.record("logs", key);
                    }
                    Err(error) => got.error(format!("logs: {error}")),
                }
            }
        });
    }
    {
        let got = got.clone();
        let mut transactions = transactions.into_stream();
        tasks.spawn(async move {
            while let Some(tx) = transactions.next().await {
                let text = |field: &str| tx[field].as_str().unwrap_or_default().to_string();
                let key = format!(
                    "{}/{}/{}",
                    text("hash"),
                    text("blockHash"),
                    tx["removed"] == true
                );
                got.record("bvMinedTransactions", key);
            }
        });
    }
    let _ = say.send(json!({"ready": true}).to_string());
    while let Some(line) = commands.recv().await {
        let words: Vec<&str> = line.split(' ').collect();
        if let [_, hash, ..] = words[..] {
            got.until(hash).await;
        }
        if words[0] == "wait" {
            let _ = say.send(json!({"have": true}).to_string());
            continue;
        }
        let mut report = Value::Object(got.topics.lock().expect("the record").clone());
        for topic in ["newHeads", "logs", "bvMinedTransactions"] {
            if report.get(topic).is_none() {
                report[topic] = json!([]);
            }
        }
        report["errors"] = json!(*got.errors.lock().expect("the errors"));
        report["reconnections"] = json!(connect.reconnections());
        // Whether the client can still ask anything.
        report["closed"] = json!(provider.get_block_number().await.is_err());
        let _ = say.send(report.to_string());
        return;
    }
}

/// `refused_resume`: args library, url. Prints {"pending": true} at its
/// first pending transaction; once its error handler has had a refusal
/// and two heads have come after it, its report.
async fn refused_resume(args: Vec<String>, (_, say): Lines) {
    let refusals: Arc<Mutex<Vec<ResumeRefusedError>>> = Arc::default();
    let connect = {
        let refusals = refusals.clone();
        resuming(&args[1])
            .on_error(move |refused| refusals.lock().expect("the refusals").push(refused))
    };
    let provider: RootProvider = ProviderBuilder::default()
        .connect_pubsub_with(connect.clone())
        .await
        .expect("connected");
    let mut heads = provider
        .subscribe_blocks()
        .await
        .expect("newHeads")
        .into_stream();
    let mut pending = provider
        .subscribe_pending_transactions()
        .await
        .expect("newPendingTransactions")
        .into_stream();
    pending.next().await.expect("a pending transaction");
    let _ = say.send(json!({"pending": true}).to_string());
    let mut heads_after = 0;
    while heads_after < 2 {
        tokio::select! {
            _ = heads.next() => {
                if !refusals.lock().expect("the refusals").is_empty() {
                    heads_after += 1;
                }
            }
            _ = pending.next() => {}
        }
    }
    let refusals: Vec<Value> = refusals
        .lock()
        .expect("the refusals")
        .iter()
        .map(|refused| {
            json!({
                "name": std::any::type_name::<ResumeRefusedError>().rsplit("::").next(),
                "code": refused.code,
                "subscription": refused.subscription,
                "cursor": refused.cursor,
                "message": refused.to_string(),
            })
        })
        .collect();
    let report = json!({
        "refusals": refusals,
        "headsAfter": heads_after,
        "subscriptions": connect.subscription_count(),
        "reconnections": connect.reconnections(),
    });
    let _ = say.send(report.to_string());
}
