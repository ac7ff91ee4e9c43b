//! The load benchmark's engine, small: every target (anvil's own
//! `eth_subscribe`, chainsieve with anvil upstream, the floor relaying
//! anvil, chainsieve's devnet taking the transactions) delivers every pending transaction to every
//! pending subscription, heads, the emitter's logs where contract code runs,
//! nothing for a silent address, and closes no client.

use std::sync::Arc;
use std::time::Duration;

use chainsieve_config::SourceConfig;
use chainsieve_tests::TestServer;
use chainsieve_tests::floor::Floor;
use chainsieve_tests::load::{self, Kind, Report, Spec, Workload};

/// `logs`: whether the emitter's logs are due (not on the devnet, which
/// runs no contract code).
fn check(target: &str, report: &Report, logs: bool) {
    let report_text = format!(
        "{target}: totals {:?}, missing {}, closed {}, refused {}, {} timed",
        report.totals,
        report.missing_pending,
        report.closed,
        report.refused,
        report.latency.len()
    );
    assert_eq!(report.missing_pending, 0, "{report_text}");
    assert_eq!(report.closed, 0, "{report_text}");
    assert_eq!(report.refused, 0, "{report_text}");
    assert!(report.totals[Kind::Heads as usize] > 0, "{report_text}");
    assert_eq!(
        report.totals[Kind::Logs as usize] > 0,
        logs,
        "{report_text}"
    );
    assert_eq!(report.totals[Kind::SilentLogs as usize], 0, "{report_text}");
    assert!(!report.latency.is_empty(), "{report_text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_target_delivers_the_whole_stream() {
    let spec = Spec {
        connections: 8,
        subscriptions_per_connection: 4,
        rate: 40,
        warmup: Duration::from_secs(1),
        measure: Duration::from_secs(2),
        timed_connections: 8,
    };
    let workload = Arc::new(Workload::new(spec.transactions()).expect("workload"));

    let anvil = workload.start_node().await.expect("anvil");
    let node = anvil.ws_url();
    let direct = load::run(&spec, workload.clone(), &node, &node, anvil.pid(), &[])
        .await
        .expect("run on anvil");
    check("anvil", &direct, true);
    assert!(direct.cpu.is_some() && direct.memory_per_connection.is_some());
    drop(anvil);

    let anvil = workload.start_node().await.expect("anvil");
    let node = anvil.ws_url();
    let server =
        TestServer::started(load::chainsieve_config(SourceConfig::node(node.clone()))).await;
    // Subscribed to the node before any transaction is sent: what anvil
    // announces before that is never forwarded.
    server.wait_live("eth").await;
    let through = load::run(
        &spec,
        workload.clone(),
        &node,
        &server.ws_url("eth", "load"),
        None,
        &[],
    )
    .await
    .expect("run on chainsieve");
    check("chainsieve", &through, true);

    let anvil = workload.start_node().await.expect("anvil");
    let node = anvil.ws_url();
    let floor = {
        let node = node.clone();
        tokio::task::spawn_blocking(move || Floor::start(&node))
            .await
            .expect("the floor's start")
            .expect("floor")
    };
    let floored = load::run(&spec, workload.clone(), &node, &floor.url(), None, &[])
        .await
        .expect("run on the floor");
    check("floor", &floored, true);
    tokio::task::spawn_blocking(move || drop(floor))
        .await
        .expect("the floor stops");

    let server = TestServer::started(load::chainsieve_config(SourceConfig::Devnet)).await;
    let url = server.ws_url("eth", "load");
    let devnet = load::run(&spec, workload, &url, &url, None, &[])
        .await
        .expect("run on the devnet");
    check("devnet", &devnet, false);
}
