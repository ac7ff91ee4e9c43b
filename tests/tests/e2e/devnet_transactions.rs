//! `eth_sendRawTransaction` on the embedded devnet, over real sockets: a
//! transaction signed here is announced pending at once and mined by the
//! next block, in the subscriptions that watch its sender; every bad
//! submission gets its EIP-1474 error and the connection keeps serving; and
//! the methods a wallet calls around it answer, so ethers sends and waits
//! on the devnet alone.

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope, TxLegacy};
use alloy_eips::Encodable2718;
use alloy_primitives::{Address, Bytes, Signature, TxKind, U256, hex, keccak256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use chainsieve_ingest::devnet::empty_blob_hash;
use chainsieve_tests::scripts::run_script;
use chainsieve_tests::typed::{blob_transaction, set_code_transaction};
use chainsieve_tests::{TestServer, WsClient, hex_address, of, quantity};
use serde_json::{Value, json};

fn sender() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&keccak256("devnet transactions test")).expect("a valid key")
}

const RECEIVER: Address = Address::repeat_byte(0x42);

/// A transfer of 5 wei from [`sender`], EIP-1559, signed for `chain_id`.
fn transfer(chain_id: u64, nonce: u64) -> TxEnvelope {
    let tx = TxEip1559 {
        chain_id,
        nonce,
        gas_limit: 21_000,
        max_fee_per_gas: 100_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to: TxKind::Call(RECEIVER),
        value: U256::from(5),
        ..Default::default()
    };
    let signature = sender()
        .sign_hash_sync(&tx.signature_hash())
        .expect("signing");
    tx.into_signed(signature).into()
}

fn raw(envelope: &TxEnvelope) -> String {
    hex::encode_prefixed(envelope.encoded_2718())
}

fn error(response: &Value) -> (i64, String) {
    let error = &response["error"];
    (
        error["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("an error: {response}")),
        error["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn a_sent_transaction_is_pending_at_once_then_mined() {
    let server = TestServer::default().await;
    let (mut client, pending, mined) = watching_sender(&server).await;
    let from = hex_address(&sender().address());

    let first = transfer(1, 0);
    let response = client
        .call("eth_sendRawTransaction", json!([raw(&first)]))
        .await
        .expect("answered");
    let hash = format!("{:#x}", first.tx_hash());
    assert_eq!(response["result"], json!(hash), "{response}");

    // Pending and mined notifications come from two filter actors, so
    // either may arrive first: read until both have told of the hash.
    let all = until_pending_and_mined(&mut client, &pending, &mined, &hash).await;
    // Only this sender's transactions match: the one sent, once each.
    let announced = of(&all, &pending);
    assert_eq!(announced.len(), 1, "announced once: {all:?}");
    let tx = announced[0];
    assert_eq!(tx["hash"], json!(hash));
    assert_eq!(tx["from"], json!(from));
    assert_eq!(tx["to"], json!(hex_address(&RECEIVER)));
    assert_eq!(
        (&tx["value"], &tx["nonce"], &tx["type"], &tx["blockHash"]),
        (&json!("0x5"), &json!("0x0"), &json!("0x2"), &json!(""))
    );
    let included = of(&all, &mined);
    assert_eq!(included.len(), 1, "mined once: {all:?}");
    let block = included[0];
    assert_eq!(block["hash"], json!(hash));
    let number = quantity(&block["blockNumber"]);
    let found = client
        .call(
            "eth_getBlockByNumber",
            json!([format!("{number:#x}"), false]),
        )
        .await
        .expect("block");
    assert!(
        found["result"]["transactions"]
            .as_array()
            .expect("transactions")
            .contains(&json!(hash)),
        "{found}"
    );

    // The same transaction again: its nonce is spent.
    let again = client
        .call("eth_sendRawTransaction", json!([raw(&first)]))
        .await
        .expect("answered");
    assert_eq!(
        error(&again),
        (-32000, "nonce too low: next nonce 1, tx nonce 0".into())
    );
    // The next one goes through on the same connection and is told of
    // once each too, and nothing else: not the refused resend, nor the
    // first again (each actor sends in order, so a repeat of the first
    // would have come before the second's).
    let next = transfer(1, 1);
    let second = client
        .call("eth_sendRawTransaction", json!([raw(&next)]))
        .await
        .expect("answered");
    let next_hash = format!("{:#x}", next.tx_hash());
    assert_eq!(second["result"], json!(next_hash), "{second}");
    let later = until_pending_and_mined(&mut client, &pending, &mined, &next_hash).await;
    for subscription in [&pending, &mined] {
        let told: Vec<&Value> = of(&later, subscription)
            .into_iter()
            .map(|tx| &tx["hash"])
            .collect();
        assert_eq!(told, [&json!(next_hash)], "{later:?}");
    }
}

/// A blob transaction sent in its network form (with its sidecar) and a
/// set-code transaction are taken, announced and mined like any other; the
/// block keeps the blob transaction without its sidecar, counts its blob
/// gas, and its lookups show every type's own fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blob_and_set_code_transactions_are_taken_and_mined() {
    let server = TestServer::default().await;
    let (mut client, pending, mined) = watching_sender(&server).await;
    let authority = PrivateKeySigner::from_bytes(&keccak256("a new account")).expect("a key");
    let sent = [
        blob_transaction(&sender(), 1, 0, RECEIVER),
        set_code_transaction(&sender(), &authority, 1, 1, RECEIVER),
    ];
    let mut hashes = Vec::new();
    for raw in &sent {
        let response = client
            .call(
                "eth_sendRawTransaction",
                json!([Bytes::copy_from_slice(raw)]),
            )
            .await
            .expect("answered");
        let hash = response["result"].as_str().expect("a hash").to_string();
        hashes.push(hash);
    }
    // Both are told of in one stream of notifications: read until each
    // has been announced and mined.
    let mut all = Vec::new();
    while hashes.iter().any(|hash| {
        with_hash(&all, &pending, hash).is_empty() || with_hash(&all, &mined, hash).is_empty()
    }) {
        all.push(client.next_notification().await.expect("a notification"));
    }
    let (blob, set_code) = (
        with_hash(&all, &pending, &hashes[0])[0],
        with_hash(&all, &pending, &hashes[1])[0],
    );
    assert_eq!(blob["type"], json!("0x3"));
    assert_eq!(blob["blobVersionedHashes"], json!([empty_blob_hash()]));
    assert_eq!(blob["maxFeePerBlobGas"], json!("0xa"));
    assert_eq!(set_code["type"], json!("0x4"));
    let authorization = &set_code["authorizationList"][0];
    assert_eq!(authorization["address"], json!(hex_address(&RECEIVER)));
    assert_eq!(set_code["to"], json!(hex_address(&authority.address())));

    for hash in &hashes {
        let receipt = client
            .call("eth_getTransactionReceipt", json!([hash]))
            .await
            .expect("receipt")["result"]
            .clone();
        let looked_up = client
            .call("eth_getTransactionByHash", json!([hash]))
            .await
            .expect("transaction")["result"]
            .clone();
        assert_eq!(looked_up["hash"], json!(hash));
        assert_eq!(looked_up["blockNumber"], receipt["blockNumber"]);
        if hash == &hashes[0] {
            assert_eq!(receipt["blobGasUsed"], json!("0x20000"), "{receipt}");
            assert_eq!(receipt["blobGasPrice"], json!("0x1"), "{receipt}");
            let block = client
                .call(
                    "eth_getBlockByNumber",
                    json!([receipt["blockNumber"], true]),
                )
                .await
                .expect("block")["result"]
                .clone();
            // The devnet's own blob transactions may share the block.
            let blobs: usize = block["transactions"]
                .as_array()
                .expect("transactions")
                .iter()
                .filter_map(|tx| tx["blobVersionedHashes"].as_array().map(Vec::len))
                .sum();
            assert!(blobs >= 1, "{block}");
            assert_eq!(quantity(&block["blobGasUsed"]), 0x20000 * blobs as u64);
            // A block of a few transactions, not of a 128 KiB blob: the
            // sidecar is not in it.
            assert!(quantity(&block["size"]) < 20_000, "{block}");
        } else {
            assert!(receipt.get("blobGasUsed").is_none(), "{receipt}");
            // The authorization's 25,000 gas is intrinsic.
            assert_eq!(quantity(&receipt["gasUsed"]), 46_000, "{receipt}");
        }
    }
}

/// A client on `eth` subscribed to [`sender`]'s pending and mined
/// transactions: (client, pending subscription, mined subscription).
async fn watching_sender(server: &TestServer) -> (WsClient, String, String) {
    let mut client = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let from = hex_address(&sender().address());
    let pending = client
        .subscribe(json!(["bvPendingTransactions", {"fromAddress": [from]}]))
        .await
        .expect("pending subscription");
    let mined = client
        .subscribe(json!(["bvMinedTransactions", {"fromAddress": [from]}]))
        .await
        .expect("mined subscription");
    (client, pending, mined)
}

/// Notifications of `subscription` among `all` for the transaction `hash`.
fn with_hash<'a>(all: &'a [(String, Value)], subscription: &str, hash: &str) -> Vec<&'a Value> {
    of(all, subscription)
        .into_iter()
        .filter(|tx| tx["hash"] == json!(hash))
        .collect()
}

/// Every notification received until both `pending` and `mined` have told
/// of the transaction `hash`.
async fn until_pending_and_mined(
    client: &mut WsClient,
    pending: &str,
    mined: &str,
    hash: &str,
) -> Vec<(String, Value)> {
    let mut all = Vec::new();
    while with_hash(&all, pending, hash).is_empty() || with_hash(&all, mined, hash).is_empty() {
        all.push(client.next_notification().await.expect("a notification"));
    }
    all
}

#[tokio::test]
async fn bad_submissions_are_answered_with_what_was_wrong() {
    let server = TestServer::default().await;
    let send = async |chain: &str, params: Value| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction", "params": params});
        let (status, response) = server.post(chain, "demo", &body.to_string()).await;
        assert_eq!(status, 200, "{response}");
        response
    };
    let invalid = |response: &Value, expected: &str| {
        let (code, message) = error(response);
        assert_eq!(code, -32602, "{response}");
        assert!(message.contains(expected), "{message:?} lacks {expected:?}");
    };
    invalid(&send("eth", json!([])).await, "one parameter");
    invalid(&send("eth", json!([7])).await, "one parameter");
    invalid(&send("eth", json!({"raw": "0x00"})).await, "positional");
    invalid(&send("eth", json!(["abcd"])).await, "0x-prefixed");
    invalid(&send("eth", json!(["0xabc"])).await, "hex digit pairs");
    invalid(
        &send("eth", json!(["0x1234"])).await,
        "invalid raw transaction",
    );

    // Signed for BNB Chain, sent to Ethereum; then to BNB Chain, over HTTP.
    let for_bsc = raw(&transfer(56, 0));
    invalid(
        &send("eth", json!([for_bsc])).await,
        "signed for chain id 56; eth is chain id 1",
    );
    assert!(send("bsc", json!([for_bsc])).await["result"].is_string());

    // No chain id (pre-EIP-155): replayable on every chain, refused.
    let unprotected = TxLegacy {
        chain_id: None,
        gas_price: 1,
        gas_limit: 21_000,
        to: TxKind::Call(RECEIVER),
        ..Default::default()
    };
    let signature = sender()
        .sign_hash_sync(&unprotected.signature_hash())
        .expect("signing");
    let unprotected = TxEnvelope::from(unprotected.into_signed(signature));
    invalid(
        &send("eth", json!([raw(&unprotected)])).await,
        "replay-protected",
    );

    // A signature no key can make (r = 0): no sender can be recovered.
    let tx = TxEip1559 {
        chain_id: 1,
        gas_limit: 21_000,
        to: TxKind::Call(RECEIVER),
        ..Default::default()
    };
    let forged = TxEnvelope::from(tx.into_signed(Signature::new(U256::ZERO, U256::from(1), false)));
    invalid(
        &send("eth", json!([raw(&forged)])).await,
        "invalid signature",
    );

    // Nonces in order: a gap is refused (the devnet queues no future ones).
    let (code, message) = error(&send("eth", json!([raw(&transfer(1, 3))])).await);
    assert_eq!(code, -32000);
    assert!(
        message.starts_with("nonce too high: next nonce 0, tx nonce 3"),
        "{message}"
    );
}

/// ethers v6 needs nothing but the devnet: `sendTransaction` then `wait()`
/// twice, the transaction count, the transaction by hash; a contract call
/// is refused saying the devnet runs no code and how to give it a node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ethers_sends_and_waits_on_the_devnet() {
    let server = TestServer::default().await;
    let key = format!("0x{}", hex::encode(sender().to_bytes()));
    let report = run_script(
        "devnet_wallet_ethers.mjs",
        &[&server.http_url("eth", "demo"), &key],
    )
    .await;
    let receipts = report["receipts"].as_array().expect("receipts");
    assert_eq!(receipts.len(), 2, "{report}");
    for receipt in receipts {
        assert_eq!(receipt["status"], 1, "{report}");
        assert_eq!(receipt["gasUsed"], "21000", "{report}");
    }
    assert_eq!(report["latest"], 2, "{report}");
    assert_eq!(report["pending"], 2, "{report}");
    assert_eq!(
        report["fetchedBlock"], receipts[1]["blockNumber"],
        "{report}"
    );
    assert!(
        report["callError"]
            .as_str()
            .is_some_and(|m| m.contains("runs no contract code") && m.contains("source")),
        "{report}"
    );
}

/// The wallet methods on the devnet, raw: a transfer's receipt and
/// transaction agree with its block; counts, fees and gas estimates; what
/// needs contract code is refused with -32601 naming the way out.
#[tokio::test]
async fn wallet_methods_answer_on_the_devnet() {
    let server = TestServer::default().await;
    let mut client = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let envelope = transfer(1, 0);
    let sent = client
        .call("eth_sendRawTransaction", json!([raw(&envelope)]))
        .await
        .expect("sent");
    let hash = sent["result"].as_str().expect("a hash").to_string();
    let pending = client
        .call(
            "eth_getTransactionCount",
            json!([hex_address(&sender().address()), "pending"]),
        )
        .await
        .expect("count");
    assert_eq!(pending["result"], "0x1");
    // Wait for heads until the receipt is there.
    let receipt = loop {
        client.collect_until(&heads, 1).await.expect("a head");
        let receipt = client
            .call("eth_getTransactionReceipt", json!([hash]))
            .await
            .expect("receipt");
        if !receipt["result"].is_null() {
            break receipt["result"].clone();
        }
    };
    assert_eq!(receipt["status"], "0x1");
    assert_eq!(receipt["gasUsed"], "0x5208");
    assert_eq!(receipt["from"], hex_address(&sender().address()));
    assert_eq!(receipt["logs"], json!([]));
    let tx = client
        .call("eth_getTransactionByHash", json!([hash]))
        .await
        .expect("tx")["result"]
        .clone();
    assert_eq!(tx["blockHash"], receipt["blockHash"]);
    assert_eq!(tx["transactionIndex"], receipt["transactionIndex"]);
    let block = client
        .call("eth_getBlockByHash", json!([receipt["blockHash"], false]))
        .await
        .expect("block")["result"]
        .clone();
    let index = quantity(&receipt["transactionIndex"]) as usize;
    assert_eq!(block["transactions"][index], json!(hash));
    let latest = client
        .call(
            "eth_getTransactionCount",
            json!([hex_address(&sender().address()), "latest"]),
        )
        .await
        .expect("count");
    assert_eq!(latest["result"], "0x1");
    // Value moved (the devnet checks no balance: the sender, never funded,
    // reads zero).
    let received = client
        .call("eth_getBalance", json!([hex_address(&RECEIVER), "latest"]))
        .await
        .expect("balance");
    assert_eq!(received["result"], "0x5");
    let spent = client
        .call(
            "eth_getBalance",
            json!([hex_address(&sender().address()), "latest"]),
        )
        .await
        .expect("balance");
    assert_eq!(spent["result"], "0x0");

    let estimate = client
        .call(
            "eth_estimateGas",
            json!([{ "to": hex_address(&RECEIVER), "value": "0x1" }]),
        )
        .await
        .expect("estimate");
    assert_eq!(estimate["result"], "0x5208");
    let with_data = client
        .call(
            "eth_estimateGas",
            json!([{ "to": hex_address(&RECEIVER), "data": "0x0100" }]),
        )
        .await
        .expect("estimate");
    assert_eq!(
        with_data["result"],
        json!(format!("{:#x}", 21_000 + 16 + 4))
    );
    let history = client
        .call("eth_feeHistory", json!(["0x3", "latest", [50]]))
        .await
        .expect("history")["result"]
        .clone();
    // Up to 3 blocks, as many as the window holds; the next block's base
    // fee besides.
    let blocks = history["gasUsedRatio"].as_array().map_or(0, Vec::len);
    assert!((1..=3).contains(&blocks), "{history}");
    assert_eq!(
        history["baseFeePerGas"].as_array().map(Vec::len),
        Some(blocks + 1)
    );
    assert_eq!(history["reward"].as_array().map(Vec::len), Some(blocks));
    // Ethereum's typical tip today: 0.1 gwei over a 0.5 gwei base fee.
    assert_eq!(history["reward"][0], json!(["0x5f5e100"]));
    let price = client.call("eth_gasPrice", json!([])).await.expect("price");
    assert_eq!(quantity(&price["result"]), 600_000_000, "{price}");

    let token = chainsieve_ingest::devnet::known_tokens(1)[0].address;
    for (method, params) in [
        (
            "eth_call",
            json!([{ "to": hex_address(&token), "data": "0x70a08231" }, "latest"]),
        ),
        (
            "eth_estimateGas",
            json!([{ "to": hex_address(&token), "data": "0x70a08231" }]),
        ),
        ("eth_estimateGas", json!([{ "data": "0x00" }])),
    ] {
        let refused = client.call(method, params).await.expect("answered");
        assert_eq!(refused["error"]["code"], -32601, "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("runs no contract code")),
            "{refused}"
        );
    }
}

/// `eth_getLogs` over the devnet's history: a token's `Transfer` logs from
/// its first block, each matching, in chain order, the one just notified
/// among them; a bad filter is -32602.
#[tokio::test]
async fn logs_are_read_over_the_devnet_history() {
    let server = TestServer::default().await;
    let mut client = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let token = chainsieve_ingest::devnet::known_tokens(1)[0].address;
    let transfer = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";
    // One such log notified first: the history then holds it.
    let watched = client
        .subscribe(json!(["logs", { "address": hex_address(&token), "topics": [transfer] }]))
        .await
        .expect("logs");
    let seen = client.collect_until(&watched, 1).await.expect("a log");
    let notified = of(&seen, &watched)[0].clone();
    let logs = client
        .call(
            "eth_getLogs",
            json!([{ "fromBlock": "earliest", "address": hex_address(&token), "topics": [transfer] }]),
        )
        .await
        .expect("logs");
    let logs = logs["result"].as_array().expect("an array").clone();
    assert!(
        logs.iter()
            .any(|log| log["transactionHash"] == notified["transactionHash"]
                && log["logIndex"] == notified["logIndex"]),
        "the notified log is in the history"
    );
    let mut last = (0, 0);
    for log in &logs {
        assert_eq!(log["address"], hex_address(&token));
        assert_eq!(log["topics"][0], transfer);
        let at = (quantity(&log["blockNumber"]), quantity(&log["logIndex"]));
        assert!(
            at > last || last == (0, 0),
            "in chain order: {at:?} after {last:?}"
        );
        last = at;
    }
    let bad = client
        .call(
            "eth_getLogs",
            json!([{ "fromBlock": "0x2", "toBlock": "0x1" }]),
        )
        .await
        .expect("answered");
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}
