//! The control of the resuming clients' tests: a connection straight to a
//! server that never drops, subscribed to the topics an application
//! follows (`tests/js/application.mjs`), and the keys its handlers record,
//! computed the same way, to compare the application's report with.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::anvil::Anvil;
use crate::{TIMEOUT, WsClient, quantity};

/// The three topics an application follows: (name, params after it).
pub fn topics(contract: &str) -> [(&'static str, Vec<Value>); 3] {
    [
        ("newHeads", vec![]),
        ("logs", vec![json!({ "address": contract })]),
        (
            "bvMinedTransactions",
            vec![json!({ "toAddress": [contract] })],
        ),
    ]
}

/// What the script's handler for `topic` records of `result`, the same way
/// (`tests/js/resuming_clients.mjs`, `tests/py/resuming_clients.py`): a
/// head's hash (ethers' "block" event gives its number only), a log's
/// block, index and removal, a transaction's hash, block and removal.
pub fn key(library: &str, topic: &str, result: &Value) -> Value {
    let text = |field: &str| result[field].as_str().unwrap_or_default().to_string();
    match topic {
        "newHeads" if library == "ethers" => json!(quantity(&result["number"])),
        "newHeads" => json!(text("hash")),
        "logs" => json!(format!(
            "{}/{}/{}",
            text("blockHash"),
            quantity(&result["logIndex"]),
            result["removed"] == true
        )),
        _ => json!(format!(
            "{}/{}/{}",
            text("hash"),
            text("blockHash"),
            result["removed"] == true
        )),
    }
}

/// The test application `name` on a client of `library`: `viem` and
/// `ethers` share `tests/js/<name>.mjs`, `python` is `tests/py/<name>.py`,
/// `alloy` is the Rust application `name` (`crate::applications`).
pub fn application(library: &str, name: &str) -> String {
    let extension = match library {
        "python" => "py",
        "alloy" => "rs",
        _ => "mjs",
    };
    format!("{name}.{extension}")
}

/// The control: a connection that never drops, subscribed to the three
/// topics before the application, its notifications read by a task of its
/// own as they come.
pub struct Control {
    feed: tokio::sync::mpsc::UnboundedReceiver<Value>,
    /// Its subscription ids, to the topic each is.
    topics: BTreeMap<String, &'static str>,
    /// Each topic's results so far, in order.
    results: BTreeMap<&'static str, Vec<Value>>,
}

impl Control {
    pub async fn subscribe(url: &str, contract: &str) -> Self {
        let mut client = WsClient::connect(url).await.expect("connect");
        let mut ids = BTreeMap::new();
        for (topic, params) in topics(contract) {
            let mut call = vec![json!(topic)];
            call.extend(params);
            let id = client
                .subscribe(Value::Array(call))
                .await
                .expect("subscribe");
            ids.insert(id, topic);
        }
        Self {
            feed: client.forward_notifications(),
            topics: ids,
            results: BTreeMap::new(),
        }
    }

    /// Reads until `topics` of the three have had an event in the block
    /// `hash`: the server has sent it to every subscriber.
    pub async fn until_block(&mut self, hash: &str, topics: usize) {
        let mut seen = BTreeSet::new();
        while seen.len() < topics {
            let params = tokio::time::timeout(TIMEOUT, self.feed.recv())
                .await
                .expect("the control's notifications in time")
                .expect("the control's connection is open");
            let topic = self.topics[params["subscription"].as_str().expect("an id")];
            let result = params["result"].clone();
            let block = if topic == "newHeads" {
                &result["hash"]
            } else {
                &result["blockHash"]
            };
            if *block == json!(hash) {
                seen.insert(topic);
            }
            self.results.entry(topic).or_default().push(result);
        }
    }

    /// Asserts that each of the application's handlers (on `library`)
    /// received what the control did, in order (`report`: what it
    /// recorded, by topic); answers the control's keys.
    pub fn assert_same(&self, library: &str, report: &Value) -> BTreeMap<&'static str, Vec<Value>> {
        let expected = self.keys(library);
        for (topic, keys) in &expected {
            assert_eq!(
                &report[*topic],
                &json!(keys),
                "{library}'s {topic} handler got what the control got: {:?}",
                compare(&expected, report)[topic]
            );
        }
        expected
    }

    /// Each topic's keys as `library`'s application records them.
    pub fn keys(&self, library: &str) -> BTreeMap<&'static str, Vec<Value>> {
        let mut keys = BTreeMap::new();
        for (topic, results) in &self.results {
            // ethers v6 hands a filter's listener no removed log (see the
            // script): an ethers application never sees one, however it
            // is connected.
            let seen = results
                .iter()
                .filter(|r| !(library == "ethers" && *topic == "logs" && r["removed"] == true));
            keys.insert(*topic, seen.map(|r| key(library, topic, r)).collect());
        }
        keys
    }
}

/// The chain's newest block: (number, hash).
pub async fn newest(anvil: &Anvil) -> (u64, String) {
    let number = anvil.block_number().await.expect("the newest block");
    let block = anvil.block(number).await.expect("the newest block");
    (number, block["hash"].as_str().expect("a hash").to_string())
}

/// Each topic's keys the control got and the application did not, and the
/// count of those it got that the control did not.
pub fn compare(
    expected: &BTreeMap<&'static str, Vec<Value>>,
    report: &Value,
) -> BTreeMap<&'static str, (Vec<Value>, usize)> {
    expected
        .iter()
        .map(|(topic, expected)| {
            let got = report[*topic].as_array().expect("recorded");
            let missing = expected.iter().filter(|e| !got.contains(e)).cloned();
            let extra = got.iter().filter(|g| !expected.contains(g)).count();
            (*topic, (missing.collect(), extra))
        })
        .collect()
}
