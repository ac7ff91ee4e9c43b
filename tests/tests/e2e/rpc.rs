//! The JSON-RPC surface over HTTP and WebSocket: keys, routing, envelopes,
//! every error code, the block methods, `token_price` validation, and
//! unsubscribing from either transport.

use chainsieve_config::{ChainConfig, Config, Span};
use chainsieve_tests::{TestServer, WsClient, quantity, test_config};
use serde_json::{Value, json};

fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {response}"))
}

fn error_message(response: &Value) -> &str {
    response["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error: {response}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_chains_are_checked_before_anything_else() {
    let server = TestServer::default().await;
    let (status, body) = server
        .post(
            "eth",
            "wrong",
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
        )
        .await;
    assert_eq!(status, 401);
    assert_eq!(error_code(&body), -32000);
    assert!(error_message(&body).contains("unknown API key"));
    let (status, body) = server
        .post(
            "solana",
            "demo",
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
        )
        .await;
    assert_eq!(status, 404);
    assert!(error_message(&body).contains("unknown chain \"solana\" (served: bsc, eth, polygon)"));
    let refused = tokio_tungstenite::connect_async(server.ws_url("eth", "wrong"))
        .await
        .expect_err("no upgrade");
    match refused {
        tokio_tungstenite::tungstenite::Error::Http(response) => {
            assert_eq!(response.status().as_u16(), 401)
        }
        other => panic!("expected an HTTP 401, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_identity_per_prefix() {
    let server = TestServer::default().await;
    for (path_chain, id_hex, version) in [
        ("eth", "0x1", "1"),
        ("bsc", "0x38", "56"),
        ("polygon", "0x89", "137"),
    ] {
        let (_, body) = server
            .post(
                path_chain,
                "demo",
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
            )
            .await;
        assert_eq!(body["result"], json!(id_hex));
        let (_, body) = server
            .post(
                path_chain,
                "demo",
                r#"{"jsonrpc":"2.0","id":2,"method":"net_version","params":[]}"#,
            )
            .await;
        assert_eq!(body["result"], json!(version));
    }
    // `/v1/<key>` is Ethereum.
    let response = reqwest::Client::new()
        .post(format!("http://{}/v1/demo", server.addr))
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#)
        .send()
        .await
        .expect("post");
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["result"], json!("0x1"));
    let (_, body) = server
        .post(
            "eth",
            "demo",
            r#"{"jsonrpc":"2.0","id":1,"method":"web3_clientVersion"}"#,
        )
        .await;
    assert!(
        body["result"]
            .as_str()
            .expect("version")
            .starts_with("chainsieve/v")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_and_error_codes() {
    let server = TestServer::default().await;
    let post = |body: &'static str| server.post("eth", "demo", body);
    let (status, body) = post("{not json").await;
    assert_eq!(
        (status, error_code(&body), body["id"].clone()),
        (200, -32700, Value::Null)
    );
    let (_, body) = post(r#"{"jsonrpc":"1.0","id":7,"method":"eth_chainId"}"#).await;
    assert_eq!((error_code(&body), body["id"].clone()), (-32600, json!(7)));
    let (_, body) =
        post(r#"{"jsonrpc":"2.0","id":"x","method":"eth_sendTransaction","params":[{}]}"#).await;
    assert_eq!(error_code(&body), -32601);
    assert!(error_message(&body).contains("eth_sendTransaction"));
    assert_eq!(body["id"], json!("x"));
    let (_, body) =
        post(r#"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#).await;
    assert_eq!(
        (error_code(&body), error_message(&body)),
        (-32601, "notifications not supported")
    );
    let (_, body) = post(r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":"x"}"#).await;
    assert_eq!(error_code(&body), -32602);
    let (_, body) = post("[]").await;
    assert_eq!(error_code(&body), -32600);
    // Ids: 0, null and strings are echoed; missing params are fine.
    let (_, body) = post(r#"{"jsonrpc":"2.0","id":0,"method":"eth_chainId"}"#).await;
    assert_eq!(body, json!({"jsonrpc":"2.0","id":0,"result":"0x1"}));
    let (_, body) = post(r#"{"jsonrpc":"2.0","id":null,"method":"net_version"}"#).await;
    assert_eq!(body, json!({"jsonrpc":"2.0","id":null,"result":"1"}));
    // A batch mixing a call, a bad request and a notification.
    let (_, body) = post(
        r#"[{"jsonrpc":"2.0","id":1,"method":"eth_chainId"},{"id":2,"method":"eth_chainId"},{"jsonrpc":"2.0","method":"eth_chainId"}]"#,
    )
    .await;
    let answers = body.as_array().expect("batch answer");
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0], json!({"jsonrpc":"2.0","id":1,"result":"0x1"}));
    assert_eq!(error_code(&answers[1]), -32600);
    // Only notifications: nothing to answer.
    let (status, body) = post(r#"{"jsonrpc":"2.0","method":"eth_chainId"}"#).await;
    assert_eq!((status, body), (204, Value::Null));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_price_validates_its_params() {
    let server = TestServer::default().await;
    let weth = "0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2";
    let usdc = "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48";
    let server = &server;
    let call = |params: Value| async move {
        let body =
            json!({"jsonrpc":"2.0","id":1,"method":"token_price","params":params}).to_string();
        server.post("eth", "demo", &body).await.1
    };
    // A pair no pool prices (two addresses that are not tokens).
    let body = call(json!({
        "timestamp": 1_700_000_000,
        "token0": "0x0000000000000000000000000000000000000001",
        "token1": "0x0000000000000000000000000000000000000002",
    }))
    .await;
    assert_eq!(error_code(&body), -32001, "{body}");
    for (params, expected) in [
        (json!({"token0": weth, "token1": weth}), "the same token"),
        (
            json!({"token0": "0x1234", "token1": usdc}),
            "is not an address",
        ),
        (json!({"token0": weth}), "missing token1"),
        (
            json!({"token0": weth, "token1": usdc, "timestamp": -5}),
            "non-negative whole number",
        ),
        (
            json!({"token0": weth, "token1": usdc, "timestamp": 1.5}),
            "non-negative whole number",
        ),
        (
            json!({"token0": weth, "token1": usdc, "pool": "x"}),
            "unknown token_price parameter \"pool\"",
        ),
        (json!(["x"]), "takes an object"),
    ] {
        let body = call(params.clone()).await;
        assert_eq!(error_code(&body), -32602, "{params}");
        assert!(error_message(&body).contains(expected), "{params}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_methods_answer_from_recent_blocks() {
    // A past of ten blocks and no live block during the test (the first
    // would come in an hour): a window of 4 holds blocks 7..=10, whatever
    // the machine's pace.
    const PAST: u64 = 10;
    let mut config = test_config();
    config.devnet.history_blocks = PAST;
    config.devnet.block_time_ms = Some(3_600_000);
    // The log as short: older logs come from the archive too.
    config.log.window = Span::Blocks(4);
    config.chains.insert(
        "eth".into(),
        ChainConfig {
            window: Some(Span::Blocks(4)),
            ..ChainConfig::default()
        },
    );
    let server = TestServer::started(config).await;
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let number = ws.call("eth_blockNumber", json!([])).await.expect("call");
    assert_eq!(number["result"], json!(format!("{PAST:#x}")), "{number}");
    let latest = ws
        .call("eth_getBlockByNumber", json!(["latest", false]))
        .await
        .expect("call");
    let block = &latest["result"];
    assert_eq!(block["number"], json!(format!("{PAST:#x}")), "{latest}");
    assert!(
        block["transactions"]
            .as_array()
            .expect("array")
            .iter()
            .all(Value::is_string)
    );
    assert_eq!(block["uncles"], json!([]));
    let full = ws
        .call("eth_getBlockByNumber", json!([block["number"], true]))
        .await
        .expect("call");
    assert_eq!(full["result"]["hash"], block["hash"]);
    let txs = full["result"]["transactions"].as_array().expect("array");
    assert!(txs.iter().all(|tx| tx["blockHash"] == block["hash"]));
    assert_eq!(
        txs.len(),
        block["transactions"].as_array().expect("array").len()
    );
    // Older than the window: the devnet's archive answers.
    let genesis = ws
        .call("eth_getBlockByNumber", json!(["0x0", true]))
        .await
        .expect("call");
    assert_eq!(genesis["result"]["number"], "0x0", "{genesis}");
    // The window's edges: its oldest block, and the one below from the
    // archive.
    let oldest = PAST - 3;
    let kept = ws
        .call(
            "eth_getBlockByNumber",
            json!([format!("{oldest:#x}"), false]),
        )
        .await
        .expect("call");
    assert_eq!(
        kept["result"]["number"],
        json!(format!("{oldest:#x}")),
        "{kept}"
    );
    let below = ws
        .call(
            "eth_getBlockByNumber",
            json!([format!("{:#x}", oldest - 1), false]),
        )
        .await
        .expect("call");
    assert_eq!(
        below["result"]["hash"], kept["result"]["parentHash"],
        "{below}"
    );
    // By hash as by number, and logs, as far back as the devnet
    // generated: block 1, its transaction, its logs.
    let one = ws
        .call("eth_getBlockByNumber", json!(["0x1", false]))
        .await
        .expect("call");
    let by_hash = ws
        .call("eth_getBlockByHash", json!([one["result"]["hash"], false]))
        .await
        .expect("call");
    assert_eq!(by_hash["result"], one["result"], "{by_hash}");
    let first_tx = one["result"]["transactions"][0].clone();
    assert!(first_tx.is_string(), "block 1 holds a transaction: {one}");
    let tx = ws
        .call("eth_getTransactionByHash", json!([first_tx]))
        .await
        .expect("call");
    assert_eq!(
        (&tx["result"]["hash"], &tx["result"]["blockNumber"]),
        (&first_tx, &json!("0x1")),
        "{tx}"
    );
    let logs = ws
        .call(
            "eth_getLogs",
            json!([{"fromBlock": "0x1", "toBlock": "0x1"}]),
        )
        .await
        .expect("call");
    let in_one = logs["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{logs}"));
    assert!(
        !in_one.is_empty() && in_one.iter().all(|log| log["blockNumber"] == "0x1"),
        "{logs}"
    );
    // Every receipt of block 1, from the archive: its logs those of the
    // block's transaction, its gas adding up to the block's.
    let mut cumulative = 0;
    let hashes = one["result"]["transactions"].as_array().expect("hashes");
    for (index, hash) in hashes.iter().enumerate() {
        let receipt = ws
            .call("eth_getTransactionReceipt", json!([hash]))
            .await
            .expect("call");
        let receipt = &receipt["result"];
        assert_eq!(
            (
                &receipt["transactionHash"],
                &receipt["blockHash"],
                &receipt["status"]
            ),
            (hash, &one["result"]["hash"], &json!("0x1")),
            "{receipt}"
        );
        assert_eq!(receipt["transactionIndex"], json!(format!("{index:#x}")));
        cumulative += quantity(&receipt["gasUsed"]);
        assert_eq!(
            quantity(&receipt["cumulativeGasUsed"]),
            cumulative,
            "{receipt}"
        );
        let its_logs: Vec<&Value> = in_one
            .iter()
            .filter(|log| &log["transactionHash"] == hash)
            .collect();
        let receipt_logs: Vec<&Value> = receipt["logs"].as_array().expect("logs").iter().collect();
        assert_eq!(receipt_logs, its_logs, "{receipt}");
    }
    assert_eq!(cumulative, quantity(&one["result"]["gasUsed"]), "{one}");
    let at_hash = ws
        .call("eth_getLogs", json!([{"blockHash": one["result"]["hash"]}]))
        .await
        .expect("call");
    assert_eq!(at_hash["result"], logs["result"], "{at_hash}");
    let all = ws
        .call(
            "eth_getLogs",
            json!([{"fromBlock": "0x0", "toBlock": "latest"}]),
        )
        .await
        .expect("call");
    let all = all["result"].as_array().unwrap_or_else(|| panic!("{all}"));
    let numbers: std::collections::BTreeSet<u64> = all
        .iter()
        .map(|log| quantity(&log["blockNumber"]))
        .collect();
    assert!(
        numbers.contains(&1) && numbers.contains(&PAST),
        "archive and log: {numbers:?}"
    );
    let future = ws
        .call("eth_getBlockByNumber", json!(["0xffffffff", false]))
        .await
        .expect("call");
    assert_eq!(future["result"], Value::Null);
    let bad = ws
        .call("eth_getBlockByNumber", json!(["0x01"]))
        .await
        .expect("call");
    assert_eq!(error_code(&bad), -32602);
    let bad = ws
        .call("eth_getBlockByHash", json!(["0x12", false]))
        .await
        .expect("call");
    assert_eq!(error_code(&bad), -32602);
    let unknown = ws
        .call(
            "eth_getBlockByHash",
            json!([format!("0x{}", "ab".repeat(32))]),
        )
        .await
        .expect("call");
    assert_eq!(unknown["result"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_errors_keep_the_connection_and_binary_frames_work() {
    let server = TestServer::default().await;
    let mut ws = WsClient::connect(&server.ws_url("polygon", "demo"))
        .await
        .expect("connect");
    ws.send_text("{oops").await;
    assert_eq!(
        error_code(&ws.next_response().await.expect("answer")),
        -32700
    );
    let unknown = ws
        .call("eth_subscribe", json!(["newBlocks"]))
        .await
        .expect("call");
    assert_eq!(error_code(&unknown), -32602);
    assert!(error_message(&unknown).contains("unknown subscription type \"newBlocks\""));
    let bad = ws
        .call("eth_subscribe", json!(["logs", {"address": "0x12"}]))
        .await
        .expect("call");
    assert_eq!(error_code(&bad), -32602);
    assert!(
        error_message(&bad).contains("address \"0x12\" must have 40 hex digits"),
        "{bad}"
    );
    let bad = ws
        .call(
            "eth_subscribe",
            json!(["newHeads", {"includeTransactions": true}]),
        )
        .await
        .expect("call");
    assert_eq!(error_code(&bad), -32602);
    ws.send_binary(br#"{"jsonrpc":"2.0","id":"bin","method":"eth_chainId"}"#.to_vec())
        .await;
    assert_eq!(
        ws.next_response().await.expect("answer"),
        json!({"jsonrpc":"2.0","id":"bin","result":"0x89"})
    );
    let oversized = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":["{}"]}}"#,
        "a".repeat(2 << 20)
    );
    ws.send_text(&oversized).await;
    let answer = ws.next_response().await.expect("answer");
    assert_eq!(error_code(&answer), -32005);
    assert!(
        error_message(&answer).contains("(limits.max_request_bytes)"),
        "{answer}"
    );
    // Still alive.
    assert_eq!(
        ws.call("net_version", json!([])).await.expect("call")["result"],
        json!("137")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribe_over_websocket_and_over_http_with_the_same_key() {
    let config = Config {
        auth: chainsieve_config::AuthConfig {
            keys: vec!["alice".into(), "bob".into()],
            ..Default::default()
        },
        ..test_config()
    };
    let server = TestServer::started(config).await;
    let mut ws = WsClient::connect(&server.ws_url("eth", "alice"))
        .await
        .expect("connect");
    let first = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    let second = ws
        .subscribe(json!(["newPendingTransactions"]))
        .await
        .expect("subscribe");
    assert_eq!(server.state.subscriptions.len(), 2);
    let done = ws
        .call("eth_unsubscribe", json!([first]))
        .await
        .expect("call");
    assert_eq!(done["result"], json!(true));
    let again = ws
        .call("eth_unsubscribe", json!([first]))
        .await
        .expect("call");
    assert_eq!(
        (error_code(&again), error_message(&again)),
        (-32000, "subscription not found")
    );
    let unsubscribe = |id: &str| {
        json!({"jsonrpc":"2.0","id":1,"method":"eth_unsubscribe","params":[id]}).to_string()
    };
    // Another key cannot cancel it; the owner's key can, over HTTP.
    let (_, body) = server.post("eth", "bob", &unsubscribe(&second)).await;
    assert_eq!(error_code(&body), -32000);
    let (_, body) = server.post("eth", "alice", &unsubscribe(&second)).await;
    assert_eq!(body["result"], json!(true));
    assert!(server.state.subscriptions.is_empty());
    // Closing a connection cancels what it still owns.
    let _third = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    assert_eq!(server.state.subscriptions.len(), 1);
    drop(ws);
    let mut other = WsClient::connect(&server.ws_url("eth", "bob"))
        .await
        .expect("connect");
    let heads = other
        .subscribe(json!(["newHeads"]))
        .await
        .expect("subscribe");
    // Each head is a chance for the closed session's cleanup to have run;
    // bounded by the client's timeout, never a sleep.
    while server.state.subscriptions.len() != 1 {
        let (subscription, _) = other.next_notification().await.expect("a head");
        assert_eq!(subscription, heads);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_pings_and_closes_are_answered() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    let server = TestServer::default().await;
    let (mut socket, _) = tokio_tungstenite::connect_async(server.ws_url("bsc", "demo"))
        .await
        .expect("connect");
    socket
        .send(Message::Ping(b"are you there".to_vec().into()))
        .await
        .expect("ping");
    let answer = tokio::time::timeout(chainsieve_tests::TIMEOUT, socket.next())
        .await
        .expect("no hang");
    match answer {
        Some(Ok(Message::Pong(payload))) => assert_eq!(&payload[..], b"are you there"),
        other => panic!("expected a pong, got {other:?}"),
    }
    // A client's close is echoed with its code, and the stream then ends.
    socket
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "done".into(),
        })))
        .await
        .expect("close");
    let echo = tokio::time::timeout(chainsieve_tests::TIMEOUT, socket.next())
        .await
        .expect("no hang");
    match echo {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::Normal),
        other => panic!("expected the close echoed, got {other:?}"),
    }
}

/// A chain that cannot start fails the whole start with a message naming
/// the chain and the cause (and the chains started before it are stopped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_that_cannot_start_is_named() {
    let not_a_dir = tempfile::NamedTempFile::new().expect("a file");
    let mut config = test_config();
    config.auth.keys = vec!["k".into()];
    config.chains.insert(
        "polygon".into(),
        ChainConfig {
            source: chainsieve_config::SourceConfig::node("ws://127.0.0.1:9"),
            ..ChainConfig::default()
        },
    );
    config.price.data_dir = Some(not_a_dir.path().join("data"));
    let error = match TestServer::start(config).await {
        Ok(_) => panic!("a data directory inside a file cannot be created"),
        Err(error) => format!("{error:#}"),
    };
    assert!(
        error.starts_with("starting chain polygon: creating the price data directory"),
        "{error}"
    );
}

/// `evm_mine` steps a devnet block by block: with an hour between blocks,
/// each call brings exactly one, answered once it is on its way; it takes
/// no parameters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evm_mine_steps_the_devnet_block_by_block() {
    let config = Config {
        devnet: chainsieve_tests::stepped_devnet(),
        ..Config::default()
    };
    let server = TestServer::started(config).await;
    let mut ws = WsClient::connect(&server.ws_url("polygon", "demo"))
        .await
        .expect("connect");
    let heads = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    let mut numbers = Vec::new();
    for _ in 0..3 {
        server.mine("polygon", "demo").await;
        let head = ws.collect_until(&heads, 1).await.expect("the mined head");
        let (_, head) = head.last().expect("a head");
        numbers.push(head["number"].as_str().expect("a number").to_string());
    }
    assert_eq!(numbers, ["0x1", "0x2", "0x3"]);
    let refused = ws.call("evm_mine", json!([1])).await.expect("answered");
    assert_eq!(error_code(&refused), -32602, "{refused}");
    assert!(error_message(&refused).contains("takes no parameters"));
    let number = ws.call("eth_blockNumber", json!([])).await.expect("call");
    assert_eq!(number["result"], json!("0x3"), "no block came unasked");
}
