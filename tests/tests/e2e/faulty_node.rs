//! The fault-injecting proxy ([`FaultyNode`]) in front of a real anvil, with
//! plain WebSocket clients: it relays faithfully, each fault does what it
//! says, and `heal` undoes it.

use std::time::Duration;

use chainsieve_tests::anvil::{Anvil, DEV_ACCOUNT, ping_contract};
use chainsieve_tests::faulty::FaultyNode;
use chainsieve_tests::{TIMEOUT, WsClient, quantity};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// How long a stalled call is given before it counts as unanswered.
const UNANSWERED: Duration = Duration::from_secs(1);

/// An anvil, a proxy in front of it and a client of the proxy.
async fn setup(chain_id: u64) -> (Anvil, FaultyNode, WsClient) {
    let anvil = Anvil::start(chain_id).await.expect("anvil starts");
    let node = FaultyNode::start(&anvil.ws_url())
        .await
        .expect("the proxy starts");
    let client = WsClient::connect(&node.ws_url())
        .await
        .expect("connecting the proxy");
    (anvil, node, client)
}

async fn result(client: &mut WsClient, method: &str, params: Value) -> Value {
    let answer = client.call(method, params).await.expect("an answer");
    assert!(answer.get("error").is_none(), "{method}: {answer}");
    answer["result"].clone()
}

async fn head_number(client: &mut WsClient) -> u64 {
    let (_, head) = client.next_notification().await.expect("a head");
    quantity(&head["number"])
}

/// Single calls, batches and subscriptions pass through unchanged; every
/// request is counted; a refused method is answered by the proxy alone,
/// also inside a batch, until `heal`.
#[tokio::test]
async fn faulty_relays_counts_and_refuses() {
    let (anvil, node, mut client) = setup(31_001).await;
    let chain_id = result(&mut client, "eth_chainId", json!([])).await;
    assert_eq!(quantity(&chain_id), 31_001);

    client
        .send_text(
            r#"[{"jsonrpc":"2.0","id":"a","method":"eth_blockNumber"},
                {"jsonrpc":"2.0","id":"b","method":"eth_chainId"}]"#,
        )
        .await;
    let batch = client.next_response().await.expect("a batch answer");
    assert_eq!(batch[0]["id"], json!("a"), "{batch}");
    assert_eq!(batch[0]["result"], json!("0x0"), "{batch}");
    assert_eq!(batch[1]["result"], chain_id, "{batch}");
    assert_eq!(node.requests("eth_chainId"), 2);
    assert_eq!(node.requests("eth_blockNumber"), 1);
    assert_eq!(node.requests("eth_getLogs"), 0);

    let heads = client
        .subscribe(json!(["newHeads"]))
        .await
        .expect("subscribed");
    anvil.mine(1).await.expect("mined");
    let (subscription, head) = client.next_notification().await.expect("a head");
    assert_eq!((subscription, quantity(&head["number"])), (heads, 1));

    node.refuse("eth_chainId");
    let refused = client
        .call("eth_chainId", json!([]))
        .await
        .expect("an answer");
    assert_eq!(refused["error"]["code"], json!(-32601), "{refused}");
    assert_eq!(
        refused["error"]["message"],
        json!("the method eth_chainId does not exist/is not available")
    );
    client
        .send_text(
            r#"[{"jsonrpc":"2.0","id":7,"method":"eth_chainId"},
                {"jsonrpc":"2.0","id":8,"method":"eth_blockNumber"},
                {"jsonrpc":"2.0","id":9,"method":"eth_chainId"}]"#,
        )
        .await;
    let batch = client.next_response().await.expect("a batch answer");
    let ids: Vec<&Value> = batch
        .as_array()
        .expect("an array")
        .iter()
        .map(|a| &a["id"])
        .collect();
    assert_eq!(ids, [&json!(7), &json!(8), &json!(9)], "{batch}");
    assert_eq!(batch[0]["error"]["code"], json!(-32601), "{batch}");
    assert_eq!(batch[1]["result"], json!("0x1"), "{batch}");
    assert_eq!(batch[2]["error"]["code"], json!(-32601), "{batch}");
    assert_eq!(node.requests("eth_chainId"), 5, "refused requests count");

    node.heal();
    assert_eq!(
        result(&mut client, "eth_chainId", json!([])).await,
        chain_id
    );
    assert_eq!(node.requests("eth_chainId"), 6);
}

/// A stalled node answers nothing and notifies nothing, and forgets what
/// came meanwhile; healed, it relays again on the same connection.
#[tokio::test]
async fn faulty_stall_then_heal() {
    let (anvil, node, mut client) = setup(31_002).await;
    client
        .subscribe(json!(["newHeads"]))
        .await
        .expect("subscribed");

    node.stall();
    anvil.mine(1).await.expect("mined");
    let stalled = tokio::time::timeout(UNANSWERED, client.call("eth_blockNumber", json!([]))).await;
    assert!(stalled.is_err(), "a stalled node answered: {stalled:?}");
    assert_eq!(node.requests("eth_blockNumber"), 1, "it reached the proxy");

    node.heal();
    assert_eq!(
        result(&mut client, "eth_blockNumber", json!([])).await,
        json!("0x1")
    );
    assert_eq!(
        client.buffered_notifications(),
        0,
        "the head mined during the stall is dropped, not replayed"
    );
    anvil.mine(1).await.expect("mined");
    assert_eq!(head_number(&mut client).await, 2);
}

/// Five blocks behind: heads are held until five later ones exist, the
/// head and the blocks above it are hidden (element-wise in a batch), and
/// `heal` releases the held heads in order.
#[tokio::test]
async fn faulty_lag_holds_heads_and_hides_blocks() {
    let (anvil, node, mut client) = setup(31_003).await;
    client
        .subscribe(json!(["newHeads"]))
        .await
        .expect("subscribed");
    node.lag(5);
    anvil.mine(7).await.expect("mined");
    // Head 2 comes out when head 7 comes in.
    assert_eq!(head_number(&mut client).await, 1);
    assert_eq!(head_number(&mut client).await, 2);

    assert_eq!(
        result(&mut client, "eth_blockNumber", json!([])).await,
        json!("0x2")
    );
    let second = anvil.block(2).await.expect("block 2");
    let seventh = anvil.block(7).await.expect("block 7");
    for tag in ["latest", "pending", "safe", "finalized"] {
        let block = result(&mut client, "eth_getBlockByNumber", json!([tag, false])).await;
        assert_eq!(block["hash"], second["hash"], "{tag}");
    }
    let third = result(&mut client, "eth_getBlockByNumber", json!(["0x3", false])).await;
    assert_eq!(third, Value::Null);
    let block = result(&mut client, "eth_getBlockByNumber", json!(["0x2", false])).await;
    assert_eq!(block, second);
    let hidden = result(
        &mut client,
        "eth_getBlockByHash",
        json!([seventh["hash"], false]),
    )
    .await;
    assert_eq!(hidden, Value::Null);
    let block = result(
        &mut client,
        "eth_getBlockByHash",
        json!([second["hash"], false]),
    )
    .await;
    assert_eq!(block, second);

    // Logs of a block the node "has not imported": what anvil answers for a
    // block it does not have.
    let unknown = anvil
        .answer(
            "eth_getLogs",
            json!([{ "blockHash": format!("0x{}", "11".repeat(32)) }]),
        )
        .await
        .expect("anvil answers");
    let logs = client
        .call("eth_getLogs", json!([{ "blockHash": seventh["hash"] }]))
        .await
        .expect("an answer");
    assert_eq!(logs["error"], unknown["error"], "{logs}");
    let logs = result(
        &mut client,
        "eth_getLogs",
        json!([{ "blockHash": second["hash"] }]),
    )
    .await;
    assert_eq!(logs, json!([]));

    client
        .send_text(
            r#"[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"},
                {"jsonrpc":"2.0","id":2,"method":"eth_getBlockByNumber","params":["latest",false]},
                {"jsonrpc":"2.0","id":3,"method":"eth_getBlockByNumber","params":["0x7",false]},
                {"jsonrpc":"2.0","id":4,"method":"eth_chainId"}]"#,
        )
        .await;
    let batch = client.next_response().await.expect("a batch answer");
    assert_eq!(batch[0]["result"], json!("0x2"), "{batch}");
    assert_eq!(batch[1]["result"]["hash"], second["hash"], "{batch}");
    assert_eq!(batch[2]["result"], Value::Null, "{batch}");
    assert_eq!(quantity(&batch[3]["result"]), 31_003, "{batch}");
    assert_eq!(client.buffered_notifications(), 0, "no head above 2 yet");

    anvil.mine(1).await.expect("mined");
    assert_eq!(head_number(&mut client).await, 3);
    node.heal();
    for expected in 4..=8 {
        assert_eq!(head_number(&mut client).await, expected);
    }
    assert_eq!(
        result(&mut client, "eth_blockNumber", json!([])).await,
        json!("0x8")
    );
}

/// Dropped connections get a close frame, then the TCP connection ends;
/// the node still accepts new ones.
#[tokio::test]
async fn faulty_drop_connections() {
    let (_anvil, node, mut client) = setup(31_004).await;
    let (mut raw, _) = tokio_tungstenite::connect_async(node.ws_url())
        .await
        .expect("connecting the proxy");
    node.drop_connections();
    let (code, _) = client.closed().await.expect("a close frame");
    assert_eq!(code, 1001);
    let frame = tokio::time::timeout(TIMEOUT, raw.next())
        .await
        .expect("closed in time");
    assert!(
        matches!(frame, Some(Ok(Message::Close(Some(_))))),
        "{frame:?}"
    );
    let end = tokio::time::timeout(TIMEOUT, raw.next())
        .await
        .expect("ended in time");
    assert!(end.is_none(), "the stream ends: {end:?}");

    let mut again = WsClient::connect(&node.ws_url())
        .await
        .expect("it keeps listening");
    assert_eq!(
        result(&mut again, "eth_blockNumber", json!([])).await,
        json!("0x0")
    );
}

/// A killed node closes its connections without a word and refuses new
/// ones; revived, it listens on the same port.
#[tokio::test]
async fn faulty_kill_and_revive() {
    let (_anvil, node, _client) = setup(31_005).await;
    let (mut raw, _) = tokio_tungstenite::connect_async(node.ws_url())
        .await
        .expect("connecting the proxy");
    raw.send(Message::text(
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
    ))
    .await
    .expect("sent");
    let answer = raw.next().await;
    assert!(matches!(answer, Some(Ok(Message::Text(_)))), "{answer:?}");

    node.kill().await;
    let end = tokio::time::timeout(TIMEOUT, raw.next())
        .await
        .expect("ended in time");
    assert!(
        matches!(end, None | Some(Err(_))),
        "no close frame, the connection just ends: {end:?}"
    );
    let refused = tokio_tungstenite::connect_async(node.ws_url()).await;
    assert!(refused.is_err(), "a killed node accepts no connection");

    node.revive().await.expect("revived");
    let mut client = WsClient::connect(&node.ws_url())
        .await
        .expect("listening again on the same port");
    assert_eq!(
        result(&mut client, "eth_blockNumber", json!([])).await,
        json!("0x0")
    );
    node.revive()
        .await
        .expect("reviving a live node does nothing");
}

/// Corrupt bodies change the first transaction's value and nothing else;
/// corrupt logs drop the last log; both off, the answers equal anvil's.
#[tokio::test]
async fn faulty_corrupt_bodies_and_logs() {
    let (anvil, node, mut client) = setup(31_006).await;
    anvil.automine(false).await.expect("automine off");
    let deploy = anvil
        .send(json!({ "from": DEV_ACCOUNT, "data": ping_contract() }))
        .await
        .expect("deploy");
    anvil.mine(1).await.expect("mined");
    let receipt = anvil
        .rpc("eth_getTransactionReceipt", json!([deploy]))
        .await
        .expect("receipt");
    let contract = receipt["contractAddress"]
        .as_str()
        .expect("contract address");
    anvil.ping(contract, 2).await;
    anvil.mine(1).await.expect("mined");

    let direct = anvil
        .rpc("eth_getBlockByNumber", json!(["0x2", true]))
        .await
        .expect("block 2");
    assert_eq!(direct["transactions"].as_array().map(Vec::len), Some(2));
    let range = json!([{ "fromBlock": "0x0", "toBlock": "latest" }]);
    let direct_logs = anvil.rpc("eth_getLogs", range.clone()).await.expect("logs");
    assert_eq!(direct_logs.as_array().map(Vec::len), Some(2));

    node.corrupt_bodies(true);
    node.corrupt_logs(true);
    let by_number = result(&mut client, "eth_getBlockByNumber", json!(["0x2", true])).await;
    let by_hash = result(
        &mut client,
        "eth_getBlockByHash",
        json!([direct["hash"], true]),
    )
    .await;
    for corrupted in [&by_number, &by_hash] {
        assert_eq!(corrupted["hash"], direct["hash"]);
        assert_eq!(corrupted["transactionsRoot"], direct["transactionsRoot"]);
        let (tx, original) = (&corrupted["transactions"][0], &direct["transactions"][0]);
        assert_ne!(tx["value"], original["value"], "{tx}");
        assert_eq!(tx["hash"], original["hash"]);
        assert_eq!(tx["input"], original["input"]);
        assert_eq!(corrupted["transactions"][1], direct["transactions"][1]);
    }
    let hashes_only = result(&mut client, "eth_getBlockByNumber", json!(["0x2", false])).await;
    let direct_hashes = anvil.block(2).await.expect("block 2");
    assert_eq!(hashes_only, direct_hashes, "nothing to corrupt");
    let empty = result(&mut client, "eth_getBlockByNumber", json!(["0x0", true])).await;
    let direct_empty = anvil
        .rpc("eth_getBlockByNumber", json!(["0x0", true]))
        .await
        .expect("block 0");
    assert_eq!(empty, direct_empty, "nothing to corrupt");
    let logs = result(&mut client, "eth_getLogs", range.clone()).await;
    assert_eq!(logs, json!([direct_logs[0]]), "the last log is gone");

    node.corrupt_bodies(false);
    node.corrupt_logs(false);
    node.lag(1);
    let lagging = result(&mut client, "eth_getLogs", range.clone()).await;
    assert_eq!(lagging, json!([]), "block 2 is above a node one behind");
    node.heal();
    let block = result(&mut client, "eth_getBlockByNumber", json!(["0x2", true])).await;
    assert_eq!(block, direct);
    assert_eq!(result(&mut client, "eth_getLogs", range).await, direct_logs);
}
