//! The `chainsieve` binary itself: it prints where it listens, serves, and
//! on SIGTERM closes every WebSocket with 1001 and exits cleanly; its logs
//! and `--help` are what an operator reads.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Starts the binary with `args` on a free port; returns it, the address
/// it announced, and its stdout (kept open: closing it would be the test's
/// doing, not the server's).
async fn start(args: &[&str]) -> (Child, String, BufReader<ChildStdout>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_chainsieve"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chainsieve");
    let stdout = child.stdout.take().expect("stdout");
    // The first line says where it listens.
    let (address, stdout) = tokio::task::spawn_blocking(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        reader.read_line(&mut line).expect("a line");
        let address = line
            .trim()
            .strip_prefix("chainsieve listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        (address, reader)
    })
    .await
    .expect("read the address");
    (child, address, stdout)
}

fn terminate(child: &Child) {
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_sockets_with_1001_and_exits_cleanly() {
    let (mut child, address, _stdout) = start(&[]).await;
    // Its logs, read as they come (a full pipe would stall the server).
    let stderr = child.stderr.take().expect("stderr");
    let (lines, mut logged) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    // Each chain's readiness names its block.
    let mut ready = 0;
    while ready < 3 {
        let line = tokio::time::timeout(TIMEOUT, logged.recv())
            .await
            .expect("a log line in time")
            .expect("the server logs");
        assert!(
            !line.contains('\x1b'),
            "piped, not a terminal: no colour codes: {line:?}"
        );
        if line.contains("chain ready") {
            assert!(line.contains(" block="), "{line}");
            ready += 1;
        }
    }
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{address}/eth/v1/demo"))
        .await
        .expect("connect");
    ws.send(Message::text(
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#,
    ))
    .await
    .expect("send");
    let ack = tokio::time::timeout(TIMEOUT, ws.next())
        .await
        .expect("an answer")
        .expect("open")
        .expect("a frame");
    assert!(
        ack.to_text().expect("text").contains("\"result\":\"0x"),
        "{ack}"
    );

    terminate(&child);
    let close = loop {
        match tokio::time::timeout(TIMEOUT, ws.next())
            .await
            .expect("the server closes")
        {
            Some(Ok(Message::Close(frame))) => break frame.expect("a close frame"),
            Some(Ok(_)) => continue,
            other => panic!("no close frame: {other:?}"),
        }
    };
    assert_eq!(close.code, CloseCode::Away);
    assert_eq!(close.reason.as_str(), "server shutting down");
    // Reading the close queued its echo; a flush sends it, as a client
    // library answers at once (else the server waits out its close
    // timeout for it).
    let _ = ws.flush().await;
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("exit status");
    assert!(status.success(), "{status}");
    // A clean shutdown warns of nothing.
    let mut stopping = Vec::new();
    while let Some(line) = logged.recv().await {
        stopping.push(line);
    }
    let stopping = stopping.join("\n");
    assert!(!stopping.contains('\x1b'), "{stopping}");
    assert!(stopping.contains("shutting down"), "{stopping}");
    assert!(
        !stopping.contains(" WARN ") && !stopping.contains("ERROR"),
        "{stopping}"
    );
}

/// `--help` shows every section of the configuration file.
#[test]
fn help_lists_every_configuration_section() {
    let help = Command::new(env!("CARGO_BIN_EXE_chainsieve"))
        .arg("--help")
        .output()
        .expect("chainsieve --help");
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).expect("utf-8");
    let config = serde_json::to_value(chainsieve::Config::default()).expect("the config");
    for (key, value) in config.as_object().expect("a table") {
        let shown = match (key.as_str(), value) {
            ("chains" | "plans", _) => format!("[{key}."),
            (_, serde_json::Value::Object(_)) => format!("[{key}]"),
            _ => format!("{key} ="),
        };
        assert!(help.contains(&shown), "{shown} not in --help:\n{help}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_json_lines_on_stderr_when_configured() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("chainsieve.toml");
    std::fs::write(
        &config,
        "[logging]\nlevel = \"chainsieve=debug,warn\"\nformat = \"json\"\n[devnet]\nhistory_blocks = 0\n",
    )
    .expect("write config");
    let (mut child, _address, _stdout) =
        start(&["--config", config.to_str().expect("utf-8")]).await;
    let stderr = child.stderr.take().expect("stderr");
    // Startup logs at debug (the filters directory it looked for).
    let first = tokio::time::timeout(
        TIMEOUT,
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stderr)
                .read_line(&mut line)
                .expect("a log line");
            line
        }),
    )
    .await
    .expect("a log line in time")
    .expect("read a log line");
    // stderr is closed now: the server must not mind (its shutdown logs
    // go nowhere) and still exit 0.
    let entry: serde_json::Value = serde_json::from_str(&first).expect("a JSON log line");
    assert!(
        entry["level"].is_string() && entry["fields"].is_object(),
        "{entry}"
    );
    terminate(&child);
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("exit status");
    assert!(status.success(), "{status}");
}

/// With a data directory, the server keeps its filter compilations in
/// `compiled/`, one file a built-in, and a restart reads them instead of
/// compiling again: the second start finds the very files the first
/// wrote (a file written anew would be another inode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reads_the_filter_compilations_it_kept() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let config = dir.path().join("chainsieve.toml");
    std::fs::write(
        &config,
        format!("data_dir = {data:?}\n[devnet]\nhistory_blocks = 0\n"),
    )
    .expect("write config");
    let kept = || -> std::collections::BTreeMap<std::path::PathBuf, u64> {
        std::fs::read_dir(data.join("compiled"))
            .expect("the compilations' directory")
            .map(|entry| {
                let entry = entry.expect("an entry");
                (entry.path(), entry.metadata().expect("metadata").ino())
            })
            .collect()
    };
    let mut written = None;
    for _ in 0..2 {
        // Listening comes after the filters are loaded.
        let (child, _address, _stdout) =
            start(&["--config", config.to_str().expect("utf-8")]).await;
        let files = kept();
        assert_eq!(
            files.len(),
            chainsieve_filters::registry::builtin_components().len(),
            "{files:?}"
        );
        if let Some(written) = &written {
            assert_eq!(&files, written, "read, not written again");
        }
        written = Some(files);
        terminate(&child);
        let mut child = child;
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .expect("join")
            .expect("exit status");
        assert!(status.success(), "{status}");
    }
}

/// A value the checks refuse is reported with the file and the line that
/// writes it (or, for a key left out, its entry's header), and the server
/// does not start.
#[test]
fn a_refused_setting_is_named_at_its_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("chainsieve.toml");
    for (text, says) in [
        (
            "[auth]\nkeys = [\"k\"]\n\n[chains.base]\nchain_id = 8453\nagreement = \"quorum\"\nquorum = 3\nsource = [\"ws://a:1\", \"ws://b:1\"]\n",
            ":7 (chains.base.quorum)",
        ),
        (
            "[auth]\nkeys = [\"k\"]\n[chains.base]\nsource = \"ws://a:1\"\n",
            ":3 (chains.base.chain_id)",
        ),
        (
            "[auth]\nkeys = [\"k\"]\n[chains.eth]\n[[chains.eth.nodes]]\nurl = \"ws://a:1\"\n[[chains.eth.nodes]]\nname = \"b\"\n",
            ":6 (chains.eth.nodes[1].url)",
        ),
    ] {
        std::fs::write(&config, text).expect("write config");
        let run = Command::new(env!("CARGO_BIN_EXE_chainsieve"))
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .output()
            .expect("run chainsieve");
        assert!(!run.status.success(), "{text}");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            stderr.contains(&format!("chainsieve.toml{says}")),
            "{text}\n{stderr}"
        );
    }
}
