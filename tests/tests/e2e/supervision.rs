//! Every long-lived task has an owner (docs/src/operations.md,
//! Supervision), shown on the real server with the fault hooks: a node
//! source made to panic is started again and its subscribers get every
//! block once, in order; a pipeline made to panic stops the server with
//! the reason; a part's task that stops turns the part not ready, with the
//! reason, while the rest serves.

use chainsieve_runtime::tasks::Part;
use chainsieve_runtime::tasks::faults::Fault;
use chainsieve_tests::anvil::Anvil;
use chainsieve_tests::{TestServer, WsClient, chained_numbers, test_config};
use serde_json::{Value, json};

const KEY: &str = "supervision-test";

/// Reads `newHeads` notifications of `client` until block `last`.
async fn heads_until(client: &mut WsClient, last: u64) -> Vec<Value> {
    let mut heads = Vec::new();
    loop {
        let head = client
            .next_notification_params()
            .await
            .expect("a head in time")["result"]
            .clone();
        let number = chainsieve_tests::quantity(&head["number"]);
        heads.push(head);
        if number >= last {
            return heads;
        }
    }
}

#[tokio::test]
async fn a_source_that_panics_is_started_again_and_its_heads_come_once_in_order() {
    let anvil = Anvil::start(1).await.expect("anvil");
    let server = TestServer::started(anvil.config(KEY)).await;
    server.wait_live("eth").await;
    let mut client = WsClient::connect(&server.ws_url("eth", KEY))
        .await
        .expect("connect");
    client.subscribe(json!(["newHeads"])).await.expect("heads");
    anvil.mine(2).await.expect("mine");
    let before = anvil.block_number().await.expect("a number");
    let mut heads = heads_until(&mut client, before).await;
    // The node's genesis may come too, as the source's first head.
    let first = chainsieve_tests::quantity(&heads[0]["number"]);

    server.state.tasks.inject("eth source", Fault::Panic);
    let eth = Part::Chain("eth".into());
    server
        .tasks_until(|tasks| tasks.trouble(&eth).is_some())
        .await;
    let (status, ready) = server.readyz().await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(
        ready["chains"]["eth"]["state"],
        json!("restarting"),
        "{ready}"
    );
    let reason = ready["chains"]["eth"]["reason"].as_str().expect("a reason");
    assert!(
        reason.starts_with(
            "eth source stopped: panicked: fault hook: eth source made to panic; started again in "
        ),
        "{reason}"
    );
    // Mined while the source is down: caught up on once it is back.
    anvil.mine(2).await.expect("mine");
    server
        .tasks_until(|tasks| {
            let standing = &tasks.standings()[&eth]["eth source"];
            standing.restarts == 1 && standing.trouble.is_none()
        })
        .await;
    server.wait_live("eth").await;
    anvil.mine(4).await.expect("mine");
    heads.extend(heads_until(&mut client, before + 6).await);
    assert_eq!(
        chained_numbers(&heads),
        (first..=before + 6).collect::<Vec<_>>(),
        "every head once, in order, across the restart"
    );
    let (status, ready) = server.readyz().await;
    assert_eq!(
        (status, &ready["chains"]["eth"]["state"]),
        (200, &json!("live")),
        "{ready}"
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"chainsieve_task_restarts_total{part="eth",task="eth source"} 1"#),
        "{metrics}"
    );
    // A client that reads nothing more would hold the server's close
    // for its timeout.
    drop(client);
    server.stop().await;
}

#[tokio::test]
async fn a_pipeline_that_panics_stops_the_server_with_the_reason() {
    let server = TestServer::started(test_config()).await;
    let mut client = WsClient::connect(&server.ws_url("eth", "demo"))
        .await
        .expect("connect");
    client.subscribe(json!(["newHeads"])).await.expect("heads");
    server.state.tasks.inject("eth pipeline", Fault::Panic);
    // Its clients are told the server is going, as at a signal.
    assert_eq!(
        client.closed().await.expect("a close frame"),
        (1001, "server shutting down".into())
    );
    let stopped = server
        .stopped()
        .await
        .expect_err("the server stops failing");
    assert_eq!(
        format!("{stopped:#}"),
        "eth pipeline stopped: panicked: fault hook: eth pipeline made to panic"
    );
}

#[tokio::test]
async fn a_part_whose_task_stops_is_not_ready_with_the_reason_while_the_rest_serves() {
    let server = TestServer::started(test_config()).await;
    server.state.tasks.inject("usage flush", Fault::Return);
    let usage = Part::Service("usage");
    server
        .tasks_until(|tasks| tasks.trouble(&usage).is_some())
        .await;
    let (status, ready) = server.readyz().await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(
        ready["parts"]["usage"],
        json!({"state": "failed", "reason": "usage flush stopped: it returned before the server stopped"}),
        "{ready}"
    );
    assert_eq!(
        ready["parts"]["webhooks"],
        json!({"state": "ready"}),
        "{ready}"
    );
    assert_eq!(ready["chains"]["eth"]["state"], json!("live"), "{ready}");
    let (status, answer) = server
        .post(
            "eth",
            "demo",
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["result"].is_string(), "{answer}");
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"chainsieve_task_down{part="usage",task="usage flush"} 1"#),
        "{metrics}"
    );
    server.stop().await;
}
