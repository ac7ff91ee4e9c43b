//! Property tests over hostile input: the JSON-RPC frame handler of a real
//! server (HTTP and WebSocket contexts, `eth_subscribe` reaching the WASM
//! filters' parameter parsers) and every built-in filter's parameter parser
//! natively. Nothing may panic; every answer is a well-formed JSON-RPC
//! response with an EIP-1474 code and a message.
//!
//! `CHAINSIEVE_FUZZ_CASES` sets the number of inputs per property (default
//! 2,000 in the test command); the README's figure comes from a run with
//! 1,000,000.

use std::cell::{Cell, RefCell};

use chainsieve_config::Config;
use chainsieve_fanout::{Frame, Sink};
use chainsieve_filter_sdk::Filter;
use chainsieve_rpc::methods::{Connection, process};
use proptest::prelude::*;
use proptest::test_runner::{Config as Runner, TestRunner};
use serde_json::{Value, json};

const CODES: [i64; 8] = [
    -32700, -32600, -32601, -32602, -32603, -32000, -32001, -32005,
];

fn cases() -> u32 {
    std::env::var("CHAINSIEVE_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000)
}

fn runner() -> TestRunner {
    TestRunner::new(Runner {
        cases: cases(),
        failure_persistence: None,
        ..Runner::default()
    })
}

/// Any JSON value, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        "[ -~]{0,12}".prop_map(Value::String),
        "0x[0-9a-fA-F]{0,66}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("fromAddress".to_string()),
                    Just("toAddress".to_string()),
                    Just("methodIds".to_string()),
                    Just("address".to_string()),
                    Just("topics".to_string()),
                    "[a-z]{1,8}",
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A request that is nearly right: real envelopes and methods, odd parts.
fn request() -> impl Strategy<Value = Value> {
    let method = prop_oneof![
        Just("eth_subscribe"),
        Just("eth_unsubscribe"),
        Just("eth_chainId"),
        Just("net_version"),
        Just("eth_blockNumber"),
        Just("eth_getBlockByNumber"),
        Just("eth_getBlockByHash"),
        Just("web3_clientVersion"),
        Just("token_price"),
        Just("eth_sendRawTransaction"),
        Just("eth_nonsense"),
    ];
    // What eth_sendRawTransaction decodes: a type byte (or an RLP list
    // head) and bytes that rarely make a transaction.
    let raw = (
        prop_oneof![
            Just(0x01u8),
            Just(0x02),
            Just(0x03),
            Just(0x04),
            Just(0xf8),
            any::<u8>()
        ],
        prop::collection::vec(any::<u8>(), 0..160),
    )
        .prop_map(|(head, body)| {
            let mut bytes = vec![head];
            bytes.extend(body);
            json!([alloy_primitives::hex::encode_prefixed(bytes)])
        });
    let topic = prop_oneof![
        Just(json!("newHeads")),
        Just(json!("logs")),
        Just(json!("bvPendingTransactions")),
        Just(json!("bvMinedTransactions")),
        Just(json!("newPendingTransactions")),
        json_value(),
    ];
    let params = prop_oneof![
        json_value(),
        raw,
        (topic, prop::collection::vec(json_value(), 0..3)).prop_map(|(t, mut rest)| {
            rest.insert(0, t);
            Value::Array(rest)
        }),
    ];
    (
        prop_oneof![Just(json!("2.0")), Just(json!("1.0")), Just(Value::Null)],
        prop::option::of(json_value()),
        method,
        prop::option::of(params),
    )
        .prop_map(|(version, id, method, params)| {
            let mut call = serde_json::Map::new();
            if !version.is_null() {
                call.insert("jsonrpc".into(), version);
            }
            if let Some(id) = id {
                call.insert("id".into(), id);
            }
            call.insert("method".into(), json!(method));
            if let Some(params) = params {
                call.insert("params".into(), params);
            }
            Value::Object(call)
        })
}

/// Raw bytes, any JSON, one nearly right request, or a batch of them.
fn frame() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        request().prop_map(|v| v.to_string().into_bytes()),
        prop::collection::vec(request(), 0..6)
            .prop_map(|v| Value::Array(v).to_string().into_bytes()),
    ]
}

/// A response object is well formed.
fn check_response(response: &Value) -> Result<(), TestCaseError> {
    prop_assert_eq!(&response["jsonrpc"], &json!("2.0"), "{}", response);
    prop_assert!(response.get("id").is_some(), "no id: {}", response);
    match (response.get("result"), response.get("error")) {
        (Some(_), None) => {}
        (None, Some(error)) => {
            let code = error["code"].as_i64().unwrap_or_default();
            prop_assert!(CODES.contains(&code), "code {} in {}", code, response);
            prop_assert!(
                error["message"].as_str().is_some_and(|m| !m.is_empty()),
                "no message: {}",
                response
            );
        }
        _ => prop_assert!(false, "neither or both of result and error: {}", response),
    }
    Ok(())
}

/// `reply` answers `frame` well formed; only a notification (a request
/// without an id), or a batch of them, goes unanswered.
fn check_reply(frame: &[u8], reply: Option<String>) -> Result<(), TestCaseError> {
    let Some(text) = reply else {
        let unanswerable = |v: &Value| v.as_object().is_some_and(|r| !r.contains_key("id"));
        let notifications = match serde_json::from_slice::<Value>(frame) {
            Ok(Value::Array(items)) => !items.is_empty() && items.iter().all(unanswerable),
            Ok(single) => unanswerable(&single),
            Err(_) => false,
        };
        prop_assert!(
            notifications,
            "no answer to {}",
            String::from_utf8_lossy(frame)
        );
        return Ok(());
    };
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {text}")))?;
    match &value {
        Value::Array(items) => {
            prop_assert!(!items.is_empty(), "an empty batch response");
            items.iter().try_for_each(check_response)
        }
        _ => check_response(&value),
    }
}

#[test]
fn the_frame_handler_answers_every_input_well_formed() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let _entered = runtime.enter();
    let mut config = Config {
        devnet: chainsieve_ingest::devnet::DevnetSettings {
            history_blocks: 4,
            ..Default::default()
        },
        ..Config::default()
    };
    config.limits.requests_per_second_per_key = 10_000_000;
    let state = runtime
        .block_on(chainsieve::app::start(
            &config,
            tokio_util::sync::CancellationToken::new(),
        ))
        .expect("server");
    let chain = state.chains["eth"].clone();
    let key = state.keys.find("demo").expect("the demo key");
    // A connection whose queue the test drains after each input (replies
    // queued there are the session's to write; the handler must still
    // answer).
    let (sink, frames) = Sink::new(1 << 16);
    let frames = RefCell::new(frames);
    let connection = Connection::new(sink);
    for over_websocket in [false, true] {
        // A runner of its own per transport: a runner counts the cases it
        // has passed, and a second run on it would run none.
        let mut runner = runner();
        let ctx = state.rpc_context(&chain, &key, over_websocket.then_some(&connection));
        // The answered frames: most inputs are requests, so most must be.
        let (cases, answered) = (Cell::new(0), Cell::new(0));
        let answers_well = |bytes: Vec<u8>| {
            let mut reply = runtime.block_on(process(ctx, &bytes)).response;
            // Over a WebSocket, eth_subscribe's answer is queued on the
            // connection, ahead of the subscription's notifications.
            let mut queued = frames.borrow_mut();
            while let Some(frame) = queued.try_recv() {
                if let (Frame::Text(text), None) = (frame, &reply) {
                    reply = Some(text);
                }
            }
            cases.set(cases.get() + 1);
            answered.set(answered.get() + usize::from(reply.is_some()));
            check_reply(&bytes, reply)
        };
        // What random inputs rarely hit, every run: a subscription made,
        // a notification (no answer), a batch that subscribes.
        for fixed in [
            r#"{"jsonrpc":"2.0","id":0,"method":"eth_subscribe","params":["newHeads"]}"#,
            r#"{"jsonrpc":"2.0","method":"eth_blockNumber"}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["logs",{}]},{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}]"#,
        ] {
            answers_well(fixed.as_bytes().to_vec()).unwrap_or_else(|e| panic!("{fixed}: {e}"));
        }
        runner
            .run(&frame(), answers_well)
            .expect("every input answered well formed");
        assert!(
            answered.get() * 2 > cases.get(),
            "{} of {} frames answered",
            answered.get(),
            cases.get()
        );
    }
    state.shutdown.cancel();
}

/// Subscribes `params` natively to a fresh `F`; it must answer, not panic.
fn check_parser<F: Filter>(params: &Value) -> Result<(), TestCaseError> {
    let mut filter = F::default();
    if let Err(error) = filter.subscribe(1, &params.to_string()) {
        prop_assert!(
            !error.to_string().is_empty(),
            "an empty refusal for {}",
            params
        );
    }
    Ok(())
}

#[test]
fn every_filter_parameter_parser_answers_every_input() {
    let params = prop_oneof![
        json_value(),
        prop::collection::vec(json_value(), 0..3).prop_map(Value::Array),
    ];
    runner()
        .run(&params, |params| {
            check_parser::<chainsieve_bv_pending_transactions::BvPendingFilter>(&params)?;
            check_parser::<chainsieve_bv_mined_transactions::BvMinedFilter>(&params)?;
            check_parser::<chainsieve_new_pending_transactions_filter::NewPendingTransactions>(
                &params,
            )?;
            check_parser::<chainsieve_new_heads_filter::NewHeads>(&params)?;
            check_parser::<chainsieve_logs_filter::Logs>(&params)
        })
        .expect("every parser answers");
}
