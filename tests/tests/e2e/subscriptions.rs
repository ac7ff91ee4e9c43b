//! Every event type on every chain, over real WebSockets against the real
//! server. Filtered subscriptions are checked against an unfiltered control
//! subscription on the same connection: the filtered one is made first, so
//! every event the control sees was offered to it too, and the expected
//! matches are exactly the control's events that satisfy the filter.

use alloy_primitives::Address;
use chainsieve_model::TxShape;
use chainsieve_tests::{TestServer, WsClient, assert_exact_filter, hex_address, of};
use serde_json::{Value, json};

const CHAINS: [(&str, u64); 3] = [("eth", 1), ("bsc", 56), ("polygon", 137)];
const TRANSFER_TOPIC: &str = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";

fn is_hex(value: &Value, digits: usize) -> bool {
    value.as_str().is_some_and(|s| {
        s.len() == 2 + digits
            && s.starts_with("0x")
            && s[2..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn is_quantity(value: &Value) -> bool {
    value.as_str().is_some_and(|s| {
        let digits = &s[2.min(s.len())..];
        s.starts_with("0x")
            && !digits.is_empty()
            && (digits == "0" || !digits.starts_with('0'))
            && digits
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
}

/// A transaction notification's identity.
fn tx_hash(tx: &Value) -> String {
    tx["hash"].as_str().expect("hash").to_string()
}

/// Checks a transaction object's shape (docs/src/api.md, Wire shapes).
fn check_transaction(tx: &Value, shape: TxShape) {
    for field in [
        "hash", "from", "gas", "input", "nonce", "value", "type", "v", "r", "s",
    ] {
        assert!(tx.get(field).is_some(), "transaction without {field}: {tx}");
    }
    assert!(is_hex(&tx["hash"], 64), "{tx}");
    assert!(is_hex(&tx["from"], 40), "from must be lowercase: {tx}");
    assert!(tx["to"].is_null() || is_hex(&tx["to"], 40), "{tx}");
    for field in ["gas", "nonce", "value", "type", "v", "r", "s"] {
        assert!(
            is_quantity(&tx[field]),
            "{field} is not a canonical quantity: {tx}"
        );
    }
    let typed = tx["type"] != json!("0x0");
    assert_eq!(
        typed,
        tx.get("yParity").is_some(),
        "yParity on typed ones: {tx}"
    );
    assert_eq!(
        typed,
        tx["accessList"].is_array(),
        "access lists on typed ones: {tx}"
    );
    match tx["type"].as_str() {
        Some("0x0" | "0x1") => {
            assert!(
                is_quantity(&tx["gasPrice"]) && tx.get("maxFeePerGas").is_none(),
                "{tx}"
            )
        }
        Some(fee_capped @ ("0x2" | "0x3" | "0x4")) => {
            assert_eq!(
                tx.get("gasPrice").is_some(),
                shape == TxShape::Geth,
                "gasPrice in geth's shape only: {tx}"
            );
            assert!(
                is_quantity(&tx["maxFeePerGas"]) && is_quantity(&tx["maxPriorityFeePerGas"]),
                "{tx}"
            );
            assert_eq!(
                fee_capped == "0x3",
                tx["blobVersionedHashes"].is_array() && is_quantity(&tx["maxFeePerBlobGas"]),
                "blob fields on blob transactions: {tx}"
            );
            assert_eq!(
                fee_capped == "0x4",
                tx["authorizationList"].is_array(),
                "authorizations on set-code transactions: {tx}"
            );
        }
        other => panic!("unexpected transaction type {other:?}"),
    }
}

fn hashes(values: &[&Value]) -> Vec<String> {
    values
        .iter()
        .map(|v| v["hash"].as_str().expect("hash").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_heads_are_consecutive_real_headers_on_every_chain() {
    let server = TestServer::default().await;
    for (chain, chain_id) in CHAINS {
        let mut ws = WsClient::connect(&server.ws_url(chain, "demo"))
            .await
            .expect("connect");
        let sub = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
        let heads: Vec<Value> = ws
            .collect_until(&sub, 3)
            .await
            .expect("heads")
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        for head in &heads {
            for field in [
                "parentHash",
                "sha3Uncles",
                "miner",
                "stateRoot",
                "transactionsRoot",
                "receiptsRoot",
                "logsBloom",
                "difficulty",
                "number",
                "gasLimit",
                "gasUsed",
                "timestamp",
                "extraData",
                "mixHash",
                "nonce",
                "baseFeePerGas",
                "hash",
            ] {
                assert!(
                    head.get(field).is_some(),
                    "{chain}: header without {field}: {head}"
                );
            }
            // The hash is the keccak of the header's RLP: a real header.
            let header: alloy_consensus::Header =
                serde_json::from_value(head.clone()).expect("a consensus header");
            assert_eq!(
                format!("{:#x}", header.hash_slow()),
                head["hash"].as_str().expect("hash"),
                "{chain}"
            );
        }
        for pair in heads.windows(2) {
            let n0 = u64::from_str_radix(&pair[0]["number"].as_str().expect("number")[2..], 16)
                .expect("hex");
            let n1 = u64::from_str_radix(&pair[1]["number"].as_str().expect("number")[2..], 16)
                .expect("hex");
            assert_eq!(n1, n0 + 1, "{chain}");
            assert_eq!(pair[1]["parentHash"], pair[0]["hash"], "{chain}");
        }
        // The block methods agree with the stream.
        let last = &heads[2];
        let by_hash = ws
            .call("eth_getBlockByHash", json!([last["hash"], false]))
            .await
            .expect("call");
        assert_eq!(by_hash["result"]["number"], last["number"], "{chain}");
        let chain_id_hex = ws.call("eth_chainId", json!([])).await.expect("call");
        assert_eq!(chain_id_hex["result"], json!(format!("{chain_id:#x}")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_pending_transactions_as_hashes_or_full_objects() {
    let server = TestServer::default().await;
    for (chain, _) in CHAINS {
        let mut ws = WsClient::connect(&server.ws_url(chain, "demo"))
            .await
            .expect("connect");
        let full = ws
            .subscribe(json!(["newPendingTransactions", true]))
            .await
            .expect("subscribe");
        let plain = ws
            .subscribe(json!(["newPendingTransactions"]))
            .await
            .expect("subscribe");
        let all = ws.collect_until(&plain, 10).await.expect("pending");
        let full_txs = of(&all, &full);
        let plain_hashes: Vec<String> = of(&all, &plain)
            .iter()
            .map(|v| v.as_str().expect("a hash string").to_string())
            .collect();
        assert!(plain_hashes.iter().all(|h| is_hex(&json!(h), 64)));
        for tx in &full_txs {
            check_transaction(tx, TxShape::Geth);
            for field in ["blockHash", "blockNumber", "transactionIndex"] {
                assert_eq!(
                    tx[field],
                    Value::Null,
                    "{chain}: geth shows pending block fields as null"
                );
            }
        }
        // The full subscription, made first, saw every transaction the hash
        // subscription saw, in the same order (same topic, same actor; it
        // may have more of the last batch, as each subscriber's share of a
        // batch is queued in one run).
        let full_hashes = hashes(&full_txs);
        assert!(
            full_hashes
                .windows(plain_hashes.len())
                .any(|window| window == plain_hashes.as_slice()),
            "{chain}: {full_hashes:?} vs {plain_hashes:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bv_pending_transactions_filter_by_sender_or_receiver() {
    let server = TestServer::default().await;
    for (chain, chain_id) in CHAINS {
        let accounts = server.devnet(chain_id).accounts();
        let senders: Vec<Address> = accounts.iter().step_by(2).copied().collect();
        // An account and a token: the token's transfers from the other
        // half of the accounts match by their receiver alone.
        let receivers = [
            accounts[1],
            chainsieve_ingest::devnet::known_tokens(chain_id)[0].address,
        ];
        let mut ws = WsClient::connect(&server.ws_url(chain, "demo"))
            .await
            .expect("connect");
        let filter = json!({
            "fromAddress": senders.iter().map(|a| a.to_checksum(None)).collect::<Vec<_>>(),
            "toAddress": receivers
                .iter()
                .map(|r| hex_address(r).to_uppercase().replace("0X", "0x"))
                .collect::<Vec<_>>(),
        });
        let filtered = ws
            .subscribe(json!(["bvPendingTransactions", filter]))
            .await
            .expect("subscribe");
        let nothing = ws
            .subscribe(json!(["bvPendingTransactions", {"fromAddress": ["0x000000000000000000000000000000000000dead"]}]))
            .await
            .expect("subscribe");
        let control = ws
            .subscribe(json!(["bvPendingTransactions"]))
            .await
            .expect("subscribe");
        let from = |tx: &Value| -> Address {
            tx["from"].as_str().expect("from").parse().expect("address")
        };
        let to = |tx: &Value| -> Option<Address> {
            tx["to"].as_str().map(|t| t.parse().expect("address"))
        };
        // Until the control has seen a transaction of each kind: one that
        // matches by its sender, one by its receiver alone.
        let mut all = Vec::new();
        let (mut by_sender, mut by_receiver_only) = (0, 0);
        for _ in 0..25 {
            all.extend(ws.collect_until(&control, 20).await.expect("pending"));
            let control_txs = of(&all, &control);
            by_sender = control_txs
                .iter()
                .filter(|tx| senders.contains(&from(tx)))
                .count();
            by_receiver_only = control_txs
                .iter()
                .filter(|tx| {
                    !senders.contains(&from(tx)) && to(tx).is_some_and(|t| receivers.contains(&t))
                })
                .count();
            if by_sender > 0 && by_receiver_only > 0 {
                break;
            }
        }
        assert!(
            by_sender > 0 && by_receiver_only > 0,
            "{chain}: in 500 transactions, {by_sender} from a listed sender and {by_receiver_only} to a listed receiver alone"
        );
        assert!(
            of(&all, &nothing).is_empty(),
            "{chain}: a filter for an unused sender matched"
        );
        let matches = |tx: &&Value| {
            senders.contains(&from(tx)) || to(tx).is_some_and(|t| receivers.contains(&t))
        };
        let control_txs = of(&all, &control);
        let filtered_txs = of(&all, &filtered);
        for tx in control_txs.iter().chain(&filtered_txs) {
            check_transaction(tx, TxShape::Blockvision);
            for field in ["blockHash", "blockNumber", "transactionIndex"] {
                assert_eq!(
                    tx[field],
                    json!(""),
                    "{chain}: bvPendingTransactions shows pending block fields as \"\""
                );
            }
        }
        let matched = assert_exact_filter(&all, &filtered, &control, tx_hash, |tx| matches(&tx));
        assert_eq!(matched, by_sender + by_receiver_only, "{chain}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bv_mined_transactions_filter_by_receiver_and_method() {
    // Stepped: the blocks the test needs come at once, not at the clock's
    // pace.
    let server = TestServer::started(chainsieve::Config {
        devnet: chainsieve_tests::stepped_devnet(),
        ..chainsieve::Config::default()
    })
    .await;
    for (chain, chain_id) in CHAINS {
        let token = chainsieve_ingest::devnet::known_tokens(chain_id)[0].address;
        let mut ws = WsClient::connect(&server.ws_url(chain, "demo"))
            .await
            .expect("connect");
        let transfers = ws
            .subscribe(json!(["bvMinedTransactions", {"toAddress": [hex_address(&token)], "methodIds": ["0xa9059cbb"]}]))
            .await
            .expect("subscribe");
        let wrong_method = ws
            .subscribe(json!(["bvMinedTransactions", {"toAddress": [hex_address(&token)], "methodIds": ["0xdeadbeef"]}]))
            .await
            .expect("subscribe");
        let control = ws
            .subscribe(json!(["bvMinedTransactions", {}]))
            .await
            .expect("subscribe");
        // Twelve transactions a block: 20 blocks hold the 150 read here.
        for _ in 0..20 {
            server.mine(chain, "demo").await;
        }
        let all = ws.collect_until(&control, 150).await.expect("mined");
        assert!(
            of(&all, &wrong_method).is_empty(),
            "{chain}: methodIds must be and-ed"
        );
        let control_txs = of(&all, &control);
        for tx in &control_txs {
            check_transaction(tx, TxShape::Blockvision);
            assert!(
                is_hex(&tx["blockHash"], 64)
                    && is_quantity(&tx["blockNumber"])
                    && is_quantity(&tx["transactionIndex"]),
                "{tx}"
            );
            assert!(tx.get("removed").is_none(), "{tx}");
        }
        let matches = |tx: &&Value| {
            tx["to"].as_str() == Some(hex_address(&token).as_str())
                && tx["input"]
                    .as_str()
                    .is_some_and(|i| i.starts_with("0xa9059cbb"))
        };
        let matched = assert_exact_filter(&all, &transfers, &control, tx_hash, |tx| matches(&tx));
        assert!(
            matched > 0,
            "{chain}: no token transfer among 150 mined transactions"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_geth_filter_rules() {
    let server = TestServer::default().await;
    for (chain, chain_id) in CHAINS {
        let token = chainsieve_ingest::devnet::known_tokens(chain_id)[0].address;
        let mut ws = WsClient::connect(&server.ws_url(chain, "demo"))
            .await
            .expect("connect");
        let transfers = ws
            .subscribe(
                json!(["logs", {"address": hex_address(&token), "topics": [TRANSFER_TOPIC]}]),
            )
            .await
            .expect("subscribe");
        // Transfer logs have 3 topics: a 4-position filter never matches.
        let too_many_positions = ws
            .subscribe(json!(["logs", {"topics": [TRANSFER_TOPIC, null, null, null]}]))
            .await
            .expect("subscribe");
        let control = ws.subscribe(json!(["logs"])).await.expect("subscribe");
        let all = ws.collect_until(&control, 60).await.expect("logs");
        assert!(of(&all, &too_many_positions).is_empty(), "{chain}");
        let control_logs = of(&all, &control);
        for log in &control_logs {
            for field in [
                "address",
                "topics",
                "data",
                "blockHash",
                "blockNumber",
                "transactionHash",
                "transactionIndex",
                "logIndex",
            ] {
                assert!(log.get(field).is_some(), "log without {field}: {log}");
            }
            assert_eq!(log["removed"], json!(false), "{log}");
            assert!(is_hex(&log["address"], 40), "{log}");
        }
        let key = |log: &&Value| format!("{}:{}", log["blockHash"], log["logIndex"]);
        let matches = |log: &&Value| {
            log["address"].as_str() == Some(hex_address(&token).as_str())
                && log["topics"][0] == json!(TRANSFER_TOPIC)
        };
        let matched = assert_exact_filter(
            &all,
            &transfers,
            &control,
            |log| key(&log),
            |log| matches(&log),
        );
        assert!(
            matched > 0,
            "{chain}: no transfer of the first token among 60 logs"
        );
    }
}

/// `eth_unsubscribe` answering `true` is the last word about that id: no
/// notification of it follows, while a subscription of the same topic
/// (same actor, so later batches) keeps receiving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_follows_an_unsubscribe_answer() {
    let server = TestServer::default().await;
    let mut client = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let gone = client
        .subscribe(json!(["newPendingTransactions"]))
        .await
        .expect("subscribe");
    // Let notifications flow before cancelling.
    client.collect_until(&gone, 2).await.expect("pending");
    let answer = client
        .call("eth_unsubscribe", json!([gone]))
        .await
        .expect("unsubscribe");
    assert_eq!(answer["result"], json!(true));
    // What arrived before the answer may still name `gone`; nothing after.
    client.discard_buffered();
    let control = client
        .subscribe(json!(["newPendingTransactions"]))
        .await
        .expect("subscribe");
    let after = client.collect_until(&control, 3).await.expect("control");
    assert!(
        of(&after, &gone).is_empty(),
        "notifications after `true`: {after:?}"
    );
}

/// A subscription made inside a JSON-RPC batch delivers nothing before the
/// batch's response, which is where the client learns its id; afterwards it
/// delivers normally. Pending transactions every half millisecond and a
/// batch long enough to take several make the race certain without the
/// gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_made_in_a_batch_starts_after_the_batch_response() {
    let config = chainsieve::Config {
        devnet: chainsieve_ingest::devnet::DevnetSettings {
            block_time_ms: Some(100),
            transactions_per_block: 200,
            pending_batches_per_block: 200,
            ..chainsieve_tests::fast_devnet()
        },
        ..chainsieve::Config::default()
    };
    let server = TestServer::started(config).await;
    let mut ws = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    let mut batch = vec![
        json!({"jsonrpc":"2.0","id":0,"method":"eth_subscribe","params":["newPendingTransactions"]}),
    ];
    batch.extend(
        (1..=30).map(
            |id| json!({"jsonrpc":"2.0","id":id,"method":"eth_subscribe","params":["newHeads"]}),
        ),
    );
    ws.send_text(&Value::Array(batch).to_string()).await;
    let response = ws.next_response().await.expect("the batch response");
    // `next_response` keeps every notification that came first: none may.
    assert_eq!(
        ws.buffered_notifications(),
        0,
        "a notification preceded the batch response"
    );
    let replies = response.as_array().expect("a batch response");
    assert_eq!(replies.len(), 31);
    let pending = replies
        .iter()
        .find(|r| r["id"] == json!(0))
        .and_then(|r| r["result"].as_str())
        .expect("the subscription id")
        .to_string();
    let mut delivered = false;
    for _ in 0..200 {
        let (subscription, _) = ws.next_notification().await.expect("notification");
        if subscription == pending {
            delivered = true;
            break;
        }
    }
    assert!(
        delivered,
        "the batch's subscription delivers after the response"
    );
}

/// The devnet's history is in place before the chain is ready, and is never
/// sent as live notifications: a `newHeads` subscriber that connects right
/// after startup (before the history is done, on any machine that takes
/// more than a few milliseconds for it) receives the first live head first.
#[tokio::test]
async fn history_is_never_notified() {
    let history = 100;
    let config = chainsieve::Config {
        devnet: chainsieve_ingest::devnet::DevnetSettings {
            history_blocks: history,
            ..chainsieve_tests::fast_devnet()
        },
        ..chainsieve_tests::test_config()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let state = chainsieve::spawn(listener, config, shutdown.clone())
        .await
        .expect("server");
    let mut ws = WsClient::connect(&format!("ws://{addr}/eth/v1/demo"))
        .await
        .expect("connect");
    // Made while the history is being generated (it takes seconds in a
    // debug build; a subscription takes milliseconds), so with history
    // notified its first head would be an old one (seen: 0x4d of 100).
    let heads = ws.subscribe(json!(["newHeads"])).await.expect("subscribe");
    let (subscription, first) = ws.next_notification().await.expect("a head");
    assert_eq!(subscription, heads);
    let number = chainsieve_tests::quantity(&first["number"]);
    assert!(
        number > history,
        "the first head notified ({number}) is a live one, after the {history} history blocks"
    );
    let eth = &state.chains["eth"];
    assert!(eth.is_synced(), "a live head means the history is in place");
    let last = json!(format!("{history:#x}"));
    let block = ws
        .call("eth_getBlockByNumber", json!([last, false]))
        .await
        .expect("the last history block");
    assert_eq!(
        block["result"]["number"], last,
        "the history is in the window"
    );
    shutdown.cancel();
}
