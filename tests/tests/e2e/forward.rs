//! One URL for everything a client calls, on a node-fed chain (anvil):
//! what chainsieve does not answer itself goes to the node and comes back
//! unchanged, result or error (a revert's data byte for byte), over HTTP
//! and WebSocket, alone or in a batch with local calls; the `[rpc]` policy
//! refuses what it does not forward; a node that is down answers a clear
//! error after the timeout while another chain's subscriptions go on, and
//! forwarding resumes when the node is back.

use std::collections::BTreeMap;

use chainsieve_config::{AuthConfig, ChainConfig, Config, RpcConfig, SourceConfig};
use chainsieve_tests::anvil::{Anvil, DEV_ACCOUNT, DEV_ACCOUNT_2, DEV_KEY, mined, ping_contract};
use chainsieve_tests::calls;
use chainsieve_tests::scripts::run_script;
use chainsieve_tests::{TestServer, WsClient, fast_devnet};
use serde_json::{Value, json};

const KEY: &str = "forward-test";

/// `eth` read from `anvil`, `bsc` on the devnet, `anvil_mine` allowed.
fn config(anvil: &Anvil) -> Config {
    let chains = BTreeMap::from([
        (
            "eth".to_string(),
            ChainConfig {
                chain_id: Some(anvil.chain_id),
                source: SourceConfig::node(anvil.ws_url()),
                ..Default::default()
            },
        ),
        ("bsc".to_string(), ChainConfig::default()),
    ]);
    Config {
        chains,
        auth: AuthConfig {
            keys: vec![KEY.to_string()],
            ..Default::default()
        },
        devnet: fast_devnet(),
        rpc: RpcConfig {
            allow: vec!["anvil_mine".into()],
            timeout_ms: 2_000,
            ..RpcConfig::default()
        },
        ..Config::default()
    }
}

/// Init code that reverts with one 32-byte word of data: `0x…cafe`.
const REVERTING: &str =
    "0x7f000000000000000000000000000000000000000000000000000000000000cafe60005260206000fd";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_answers_what_chainsieve_does_not() {
    let mut anvil = Anvil::start(1).await.expect("anvil");
    // Blocks before the server starts: its window begins at the node's
    // head then, so genesis is a block only the node holds.
    anvil.mine(3).await.expect("mine");
    let server = TestServer::started(config(&anvil)).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");

    // Forwarded over WebSocket and HTTP, answered as the node answers.
    let balance = json!([DEV_ACCOUNT_2, "latest"]);
    let direct = anvil
        .answer("eth_getBalance", balance.clone())
        .await
        .expect("anvil");
    let over_ws = client
        .call("eth_getBalance", balance.clone())
        .await
        .expect("ws");
    assert_eq!(over_ws["result"], direct["result"], "{over_ws}");
    let (status, over_http) = server
        .post(
            "eth",
            KEY,
            &json!({"jsonrpc":"2.0","id":"b","method":"eth_getBalance","params":balance})
                .to_string(),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(over_http["id"], "b", "the client's id comes back");
    assert_eq!(over_http["result"], direct["result"]);

    // A revert: the node's error, code, message and data, unchanged.
    let call = json!([{ "from": DEV_ACCOUNT, "data": REVERTING }, "latest"]);
    let direct = anvil.answer("eth_call", call.clone()).await.expect("anvil");
    assert!(direct["error"]["data"].is_string(), "anvil: {direct}");
    let reverted = client.call("eth_call", call).await.expect("answered");
    assert_eq!(reverted["error"], direct["error"], "{reverted}");

    // A batch mixing local and forwarded calls, answered in order.
    let (_, batch) = server
        .post(
            "eth",
            KEY,
            &json!([
                {"jsonrpc":"2.0","id":1,"method":"eth_chainId"},
                {"jsonrpc":"2.0","id":2,"method":"eth_getTransactionCount","params":[DEV_ACCOUNT,"latest"]},
                {"jsonrpc":"2.0","id":3,"method":"eth_blockNumber"},
                {"jsonrpc":"2.0","id":4,"method":"debug_traceCall","params":[]},
            ])
            .to_string(),
        )
        .await;
    let ids: Vec<&Value> = batch
        .as_array()
        .expect("a batch")
        .iter()
        .map(|a| &a["id"])
        .collect();
    assert_eq!(ids, [&json!(1), &json!(2), &json!(3), &json!(4)], "{batch}");
    assert_eq!(batch[0]["result"], "0x1");
    assert_eq!(
        batch[1]["result"],
        anvil
            .rpc("eth_getTransactionCount", json!([DEV_ACCOUNT, "latest"]))
            .await
            .expect("anvil")
    );
    assert!(batch[2]["result"].is_string(), "{batch}");

    // The policy: debug_* refused, node-wallet methods refused, an
    // allowed node-specific method forwarded.
    for refused in [
        &batch[3],
        &client
            .call("eth_accounts", json!([]))
            .await
            .expect("answered"),
    ] {
        assert_error(refused, -32601, "[rpc] allow");
    }
    let before = anvil.block_number().await.expect("number");
    let mined = client
        .call("anvil_mine", json!(["0x1"]))
        .await
        .expect("answered");
    assert!(mined.get("error").is_none(), "{mined}");
    assert_eq!(anvil.block_number().await.expect("number"), before + 1);

    // A block the window does not hold comes from the node.
    assert!(
        server.state.chains["eth"]
            .canonical()
            .by_number(0)
            .is_none(),
        "genesis is outside the window"
    );
    let genesis = client
        .call("eth_getBlockByNumber", json!(["0x0", false]))
        .await
        .expect("answered");
    let direct = anvil.block(0).await.expect("anvil");
    assert_eq!(genesis["result"]["hash"], direct["hash"], "{genesis}");

    // The node goes down: a clear error; the devnet chain notifies on.
    let mut devnet_client = WsClient::connect(&server.ws_url("bsc", KEY))
        .await
        .expect("connect");
    let heads = devnet_client
        .subscribe(json!(["newHeads"]))
        .await
        .expect("heads");
    anvil.stop().await.expect("anvil stops");
    let down = client
        .call("eth_getBalance", json!([DEV_ACCOUNT, "latest"]))
        .await
        .expect("answered");
    assert_eq!(down["error"]["code"], -32002, "{down}");
    assert!(
        down["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("eth's node")),
        "{down}"
    );
    devnet_client
        .collect_until(&heads, 2)
        .await
        .expect("the devnet's heads go on");

    // Back up: forwarding resumes on a new connection.
    anvil.resume().await.expect("anvil starts again");
    let back = client
        .call("eth_getBalance", json!([DEV_ACCOUNT_2, "latest"]))
        .await
        .expect("answered");
    assert!(back["result"].is_string(), "{back}");
}

/// ethers v6 and viem with chainsieve's URL as their only provider: each
/// deploys a contract, calls it, sends a transaction and waits for its
/// receipt, reads the contract's logs and its balance, and sees a revert's
/// data, all answered as the node answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ethers_and_viem_need_only_chainsieve() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::started(config(&anvil)).await;
    let url = server.http_url("eth", KEY);
    for script in ["one_url_ethers.mjs", "one_url_viem.mjs"] {
        let report = run_script(script, &[&url, DEV_KEY, &ping_contract(), REVERTING]).await;
        let contract = report["contract"].as_str().expect("deployed");
        let code = anvil
            .rpc("eth_getCode", json!([contract, "latest"]))
            .await
            .expect("anvil");
        assert_ne!(code, "0x", "{script}: the contract is on the node");
        for status in ["deployStatus", "pingStatus"] {
            assert!(
                report[status] == 1 || report[status] == "success",
                "{script}: {report}"
            );
        }
        assert_eq!(report["called"], "0x", "{script}: {report}");
        assert_eq!(report["pingLogs"], 1, "{script}: {report}");
        assert_eq!(
            report["logs"],
            json!([report["pingHash"]]),
            "{script}: {report}"
        );
        let balance = anvil
            .rpc("eth_getBalance", json!([DEV_ACCOUNT, "latest"]))
            .await
            .expect("anvil");
        let balance =
            u128::from_str_radix(balance.as_str().expect("hex").trim_start_matches("0x"), 16)
                .expect("a quantity");
        assert_eq!(report["balance"], balance.to_string(), "{script}: {report}");
        assert_eq!(
            report["revertData"],
            "0x000000000000000000000000000000000000000000000000000000000000cafe",
            "{script}: {report}"
        );
    }
}

/// `eth_getLogs` on a node chain: a range the server's log holds is
/// answered from it, one reaching further back by the node; both as the
/// node answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_come_from_the_log_or_the_node() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let deploy = anvil
        .send(json!({ "from": DEV_ACCOUNT, "data": ping_contract() }))
        .await
        .expect("deploy");
    // Anvil answers before its automine block exists: mine until it does.
    let receipt = loop {
        let receipt = anvil
            .rpc("eth_getTransactionReceipt", json!([deploy]))
            .await
            .expect("receipt");
        if !receipt.is_null() {
            break receipt;
        }
        anvil.mine(1).await.expect("mine");
    };
    let contract = receipt["contractAddress"]
        .as_str()
        .expect("address")
        .to_string();
    anvil.ping(&contract, 1).await;
    // Older than the window the server will keep (128 blocks).
    anvil.mine(300).await.expect("mine");
    let server = TestServer::started(config(&anvil)).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let recent = anvil.ping(&contract, 1).await;
    // Its block has reached the server's log once its head is out.
    let (mined, _) = chainsieve_tests::anvil::mined(&mut client, &heads, &anvil, &recent[0]).await;
    let recent_block = mined["blockNumber"].clone();
    let old = json!({ "address": contract, "fromBlock": "0x0" });
    let held = json!({ "address": contract, "fromBlock": recent_block, "toBlock": recent_block });
    let mut direct = Vec::new();
    for filter in [&old, &held] {
        let answer = anvil
            .answer("eth_getLogs", json!([filter]))
            .await
            .expect("anvil");
        let served = client
            .call("eth_getLogs", json!([filter]))
            .await
            .expect("answered");
        assert_eq!(served["result"], answer["result"], "{filter}: {served}");
        assert!(
            !served["result"].as_array().is_none_or(Vec::is_empty),
            "{served}"
        );
        direct.push(answer);
    }
    // Which answered: with the node down, the range the log holds is
    // answered the same from the log, and the older one cannot be.
    let mut anvil = anvil;
    anvil.stop().await.expect("anvil stops");
    let served = client
        .call("eth_getLogs", json!([held]))
        .await
        .expect("answered");
    assert_eq!(served["result"], direct[1]["result"], "{served}");
    let old_range = client
        .call("eth_getLogs", json!([old]))
        .await
        .expect("answered");
    assert_eq!(old_range["error"]["code"], -32002, "{old_range}");
}

/// A node that stops answering but keeps its socket open (`SIGSTOP`): a
/// forwarded call answers -32002 after `timeout_ms` (requests sent behind
/// it on the same WebSocket are answered first, without waiting, a mined
/// transaction from the window), the hung connection is dropped, and once
/// the node runs again (`SIGCONT`) calls go through a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_node_times_out_and_is_reconnected() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::started(config(&anvil)).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    // A transfer mined into the window, as the node shows it.
    let heads = client
        .subscribe(json!(["newHeads"]))
        .await
        .expect("subscribed");
    let transfer = anvil
        .send(json!({ "from": DEV_ACCOUNT, "to": DEV_ACCOUNT_2, "value": "0x1" }))
        .await
        .expect("a transfer");
    mined(&mut client, &heads, &anvil, &transfer).await;
    let direct = anvil
        .rpc("eth_getTransactionByHash", json!([transfer]))
        .await
        .expect("the node's transaction");
    let balance = json!([DEV_ACCOUNT_2, "latest"]);
    let before = client
        .call("eth_getBalance", balance.clone())
        .await
        .expect("answered");
    assert!(before["result"].is_string(), "{before}");
    let hung_node = HungNode::stop(&anvil).await;
    // A request sent behind the hung one does not wait for it.
    client
        .send_text(
            &json!({"jsonrpc":"2.0","id":100,"method":"eth_getBalance","params":balance})
                .to_string(),
        )
        .await;
    client
        .send_text(r#"{"jsonrpc":"2.0","id":101,"method":"eth_chainId"}"#)
        .await;
    // The window answers for the transfer while the node is hung.
    client
        .send_text(
            &json!({"jsonrpc":"2.0","id":102,"method":"eth_getTransactionByHash","params":[transfer]})
                .to_string(),
        )
        .await;
    let behind = client.next_response().await.expect("answered");
    let held = client.next_response().await.expect("answered");
    let hung = client.next_response().await.expect("answered");
    hung_node.resume().await;
    assert_eq!(
        (&behind["id"], &held["id"], &hung["id"]),
        (&json!(101), &json!(102), &json!(100))
    );
    assert_eq!(behind["result"], "0x1", "{behind}");
    let held = held["result"].as_object().expect("the transfer");
    for (field, value) in held {
        assert_eq!(
            &direct[field], value,
            "{field}: the window's {held:?}, the node's {direct}"
        );
    }
    for field in [
        "hash",
        "blockHash",
        "blockNumber",
        "from",
        "to",
        "value",
        "nonce",
        "r",
        "s",
    ] {
        assert!(held.contains_key(field), "{field} in {held:?}");
    }
    assert_error(
        &hung,
        -32002,
        "did not answer eth_getBalance within 2000 ms",
    );
    let after = client
        .call("eth_getBalance", balance)
        .await
        .expect("answered");
    assert_eq!(after["result"], before["result"], "{after}");
}

/// A connection with as many calls in flight as it takes (64), all waiting
/// on a hung node, stops reading, and so cannot read the client's pongs:
/// it is not taken for unresponsive while it waits, however many ping
/// intervals pass, and it reads on once the calls time out, each within
/// the configured timeout though none could even connect (no call was
/// forwarded before the node hung).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_waiting_on_a_hung_node_is_not_taken_for_unresponsive() {
    const IN_FLIGHT: u64 = 64;
    let anvil = Anvil::start(1).await.expect("anvil");
    let mut config = config(&anvil);
    // Four ping intervals pass while the calls wait.
    config.rpc.timeout_ms = 4_000;
    config.limits.ping_interval_secs = 1;
    let server = TestServer::started(config).await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    let hung_node = HungNode::stop(&anvil).await;
    let balance = json!([DEV_ACCOUNT_2, "latest"]);
    for id in 0..IN_FLIGHT {
        client
            .send_text(
                &json!({"jsonrpc":"2.0","id":id,"method":"eth_getBalance","params":balance})
                    .to_string(),
            )
            .await;
    }
    // Read only once a slot frees: after the timeout.
    client
        .send_text(&format!(
            r#"{{"jsonrpc":"2.0","id":{IN_FLIGHT},"method":"eth_chainId"}}"#
        ))
        .await;
    // Reading the answers also answers the server's pings meanwhile.
    let mut timed_out = 0;
    let mut chain_id = None;
    for _ in 0..=IN_FLIGHT {
        let answer = client.next_response().await.expect("answered, not closed");
        if answer["id"] == json!(IN_FLIGHT) {
            chain_id = Some(answer["result"].clone());
        } else {
            // Each within the configured timeout, connecting included (the
            // node's kernel accepts the connection; the handshake hangs).
            assert_error(
                &answer,
                -32002,
                "did not answer eth_getBalance within 4000 ms",
            );
            timed_out += 1;
        }
    }
    hung_node.resume().await;
    assert_eq!(timed_out, IN_FLIGHT);
    assert_eq!(chain_id, Some(json!(format!("{:#x}", anvil.chain_id))));
    let after = client
        .call("eth_getBalance", balance)
        .await
        .expect("the connection is still open");
    assert!(after["result"].is_string(), "{after}");
}

/// Asserts `answer` is a JSON-RPC error of `code` whose message contains
/// `part`.
fn assert_error(answer: &Value, code: i64, part: &str) {
    assert_eq!(answer["error"]["code"], code, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(part)),
        "{answer}"
    );
}

/// A node stopped with `SIGSTOP`: it keeps its sockets open and answers
/// nothing until [`HungNode::resume`].
struct HungNode {
    pid: String,
}

impl HungNode {
    /// Stops `anvil` and waits until the kernel shows it stopped (the
    /// signal is delivered asynchronously).
    async fn stop(anvil: &Anvil) -> Self {
        let node = Self {
            pid: anvil.pid().expect("anvil runs").to_string(),
        };
        node.signal("-STOP").await;
        let stat = format!("/proc/{}/stat", node.pid);
        tokio::time::timeout(chainsieve_tests::TIMEOUT, async {
            loop {
                let text = tokio::fs::read_to_string(&stat).await.expect("/proc stat");
                // "pid (comm) STATE ...": the state follows the last ')'.
                if text
                    .rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('T'))
                {
                    break;
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the node stops");
        node
    }

    async fn resume(self) {
        self.signal("-CONT").await;
    }

    async fn signal(&self, name: &str) {
        let status = tokio::process::Command::new("kill")
            .args([name, &self.pid])
            .status()
            .await
            .expect("kill runs");
        assert!(status.success(), "kill {name}");
    }
}

/// The forwarding benchmark's engine, small: calls on a schedule through
/// chainsieve are all answered, each as the node answers it directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_at_a_rate_are_answered_as_the_node_answers() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::started(config(&anvil)).await;
    let params = json!([DEV_ACCOUNT, "latest"]);
    // A hundred calls, at 200 a second.
    let (rate, duration) = (200, std::time::Duration::from_millis(500));
    let direct = calls::run(&anvil.ws_url(), "eth_getBalance", &params, rate, duration)
        .await
        .expect("direct calls");
    let forwarded = calls::run(
        &server.ws_url("eth", KEY),
        "eth_getBalance",
        &params,
        rate,
        duration,
    )
    .await
    .expect("forwarded calls");
    for calls in [&direct, &forwarded] {
        assert_eq!(calls.errors, 0, "{:?}", calls.first_error);
        assert_eq!(calls.latency.len(), 100);
        assert_eq!(calls.results.len(), 100);
    }
    assert!(direct.results[0].is_string(), "{:?}", direct.results[0]);
    assert_eq!(forwarded.results, direct.results);
}

/// Forwarded calls count against the key's requests per second like any
/// other: past the rate, -32005.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_calls_count_against_the_key_rate() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let mut config = config(&anvil);
    config.limits.requests_per_second_per_key = 2;
    let server = TestServer::started(config).await;
    let call = |id: u32| json!({"jsonrpc":"2.0","id":id,"method":"eth_getBalance","params":[DEV_ACCOUNT, "latest"]});
    let (status, batch) = server
        .post("eth", KEY, &json!([call(1), call(2), call(3)]).to_string())
        .await;
    assert_eq!(status, 200, "{batch}");
    assert!(batch[0]["result"].is_string(), "{batch}");
    assert!(batch[1]["result"].is_string(), "{batch}");
    assert_eq!(batch[2]["error"]["code"], -32005, "{batch}");
    assert!(
        batch[2]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("2 requests per second")),
        "{batch}"
    );
}
