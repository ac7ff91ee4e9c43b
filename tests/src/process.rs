//! The `chainsieve` binary as a process of its own, for the tests that
//! kill one (`kill -9`) mid-stream: started with a config file on
//! `127.0.0.1:0`, its address read from the line it prints, its log lines
//! (JSON, `[logging] format = "json"`) kept for the test to wait on.

use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::TIMEOUT;
use crate::anvil::Anvil;

/// The config of a server process reading `anvil` as its `eth` chain, `key`
/// its one API key, logging JSON (what [`ServerProcess::logged`] reads):
/// `top` (top-level settings) before the sections, `sections` after them.
pub fn anvil_config(anvil: &Anvil, key: &str, top: &str, sections: &str) -> String {
    format!(
        r#"
{top}
[auth]
keys = ["{key}"]
[chains.eth]
chain_id = {chain_id}
source = "{node}"
[logging]
format = "json"
level = "info"
{sections}
"#,
        chain_id = anvil.chain_id,
        node = anvil.ws_url(),
    )
}

/// One server process. Killed when dropped.
pub struct ServerProcess {
    pub addr: std::net::SocketAddr,
    child: Child,
    /// Its log lines as they come (a task reads stderr so the process
    /// never blocks on a full pipe).
    log: mpsc::UnboundedReceiver<String>,
    /// Keeps the config file as long as the process may read it.
    _config: tempfile::NamedTempFile,
}

impl ServerProcess {
    /// Runs `binary --config <file holding config_toml> --listen
    /// 127.0.0.1:0` and waits for the address it announces.
    pub async fn start(binary: &Path, config_toml: &str) -> anyhow::Result<Self> {
        let config = tempfile::NamedTempFile::new().context("a config file")?;
        std::fs::write(config.path(), config_toml).context("writing the config")?;
        let mut child = Command::new(binary)
            .arg("--config")
            .arg(config.path())
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stderr = child.stderr.take().context("the server's stderr")?;
        let (lines, log) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut stderr = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = stderr.next_line().await {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let stdout = child.stdout.take().context("the server's stdout")?;
        let mut stdout = BufReader::new(stdout).lines();
        let announced = async {
            while let Some(line) = stdout.next_line().await? {
                if let Some(address) = line.strip_prefix("chainsieve listening on http://") {
                    return Ok(address.trim().parse()?);
                }
            }
            bail!("the server exited before it listened")
        };
        let announced = tokio::time::timeout(TIMEOUT, announced)
            .await
            .context("the server did not listen in time")?;
        let addr = match announced {
            Ok(addr) => addr,
            Err(error) => {
                let said = last_words(log).await;
                return Err(
                    error.context(format!("starting {}; its log:\n{said}", binary.display()))
                );
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
        Ok(Self {
            addr,
            child,
            log,
            _config: config,
        })
    }

    pub fn ws_url(&self, chain: &str, key: &str) -> String {
        format!("ws://{}/{chain}/v1/{key}", self.addr)
    }

    /// Waits (within [`TIMEOUT`]) for a log line containing `text`;
    /// returns it. Lines before it are passed over.
    pub async fn logged(&mut self, text: &str) -> anyhow::Result<String> {
        let found = async {
            while let Some(line) = self.log.recv().await {
                if line.contains(text) {
                    return Ok(line);
                }
            }
            bail!("the server's log ended before \"{text}\"")
        };
        tokio::time::timeout(TIMEOUT, found)
            .await
            .with_context(|| format!("no log line with \"{text}\" in time"))?
    }

    /// What `/readyz` says.
    pub async fn readiness(&self) -> anyhow::Result<serde_json::Value> {
        let url = format!("http://{}/readyz", self.addr);
        let response = reqwest::get(&url)
            .await
            .with_context(|| format!("GET {url}"))?;
        response.json().await.context("/readyz's JSON")
    }

    /// `kill -9`: no shutdown, no goodbye to clients or the bus.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill().await.context("killing the server")
    }
}

/// What a server that stopped before it listened wrote to stderr: its
/// stderr ends with it, or is cut after a few seconds.
async fn last_words(mut log: mpsc::UnboundedReceiver<String>) -> String {
    let mut lines = Vec::new();
    let read = async {
        while let Some(line) = log.recv().await {
            lines.push(line);
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), read).await;
    lines.join("\n")
}
