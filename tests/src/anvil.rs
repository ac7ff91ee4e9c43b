//! Real upstream nodes for tests: anvil from npm (`tests/js`, installed by
//! the test command), one process per chain, on a free port, with `HOME`
//! in a temp dir (anvil writes state files there).

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, bail};
use chainsieve_config::{Config, SourceConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::{TIMEOUT, WsClient, quantity};

/// Anvil's first dev account (funded, unlocked).
pub const DEV_ACCOUNT: &str = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266";
/// [`DEV_ACCOUNT`]'s private key (anvil's well-known first key), for
/// clients that sign themselves.
pub const DEV_KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
/// Anvil's second dev account.
pub const DEV_ACCOUNT_2: &str = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("js/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil")
}

/// The topic of the log [`ping_runtime`] emits on every call: `Ping()`.
pub fn ping_topic() -> String {
    alloy_primitives::keccak256("Ping()").to_string()
}

/// Runtime code of a contract that emits `Ping()` (LOG1, no data) on every
/// call, 39 bytes, hex without `0x`.
pub fn ping_runtime() -> String {
    format!("7f{}60006000a100", &ping_topic()[2..])
}

/// Init code deploying [`ping_runtime`]: `CODECOPY` the 39 bytes and
/// `RETURN` them.
pub fn ping_contract() -> String {
    format!("0x6027600c60003960276000f3{}", ping_runtime())
}

/// Runtime code of a contract that emits an ERC-20 `Transfer` of 1 from
/// the caller to the caller (LOG3: the event's topic, `from`, `to`; the
/// amount as data) on every call, 46 bytes, hex without `0x`: a token's
/// logs, for the `erc20Transfers` example filter, without a token.
pub fn transfer_runtime() -> String {
    let topic = alloy_primitives::keccak256("Transfer(address,address,uint256)");
    format!(
        "600160005233337f{}60206000a300",
        alloy_primitives::hex::encode(topic)
    )
}

/// Init code deploying [`transfer_runtime`].
pub fn transfer_contract() -> String {
    format!("0x602e600c600039602e6000f3{}", transfer_runtime())
}

/// One anvil process. Killed when dropped.
pub struct Anvil {
    pub chain_id: u64,
    pub port: u16,
    /// Extra command-line options, kept for restarts.
    options: Vec<String>,
    child: Child,
    home: tempfile::TempDir,
    http: reqwest::Client,
}

impl Anvil {
    /// Starts anvil for `chain_id` on a free port.
    pub async fn start(chain_id: u64) -> anyhow::Result<Self> {
        Self::start_on(chain_id, 0).await
    }

    /// Starts anvil for `chain_id` on `port` (0: any free port).
    pub async fn start_on(chain_id: u64, port: u16) -> anyhow::Result<Self> {
        Self::start_with(chain_id, port, &[]).await
    }

    /// Starts anvil for `chain_id` on `port` with extra command-line
    /// `options` (say `--block-time 1`).
    pub async fn start_with(chain_id: u64, port: u16, options: &[&str]) -> anyhow::Result<Self> {
        let home = tempfile::tempdir().context("anvil home")?;
        let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
        let (child, port) = spawn(chain_id, port, &options, &home).await?;
        Ok(Self {
            chain_id,
            port,
            options,
            child,
            home,
            http: reqwest::Client::new(),
        })
    }

    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.port)
    }

    /// A server config whose one chain, `eth`, reads this node, accepting
    /// the API key `key`.
    pub fn config(&self, key: &str) -> Config {
        crate::reading(
            key,
            [("eth", self.chain_id, SourceConfig::node(self.ws_url()))],
        )
    }

    /// The node's process id (to read its CPU time and memory).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Stops the node (it dumps its chain to its state file), mines
    /// `mined_while_down` blocks on that chain in a node on another port,
    /// then starts the node again on its own port from the state file: the
    /// same chain, resumed, possibly ahead of what its clients saw.
    pub async fn restart(&mut self, mined_while_down: u64) -> anyhow::Result<()> {
        self.stop().await?;
        if mined_while_down > 0 {
            let (mut offline, port) = spawn(self.chain_id, 0, &self.options, &self.home).await?;
            let mined = answer(
                &self.http,
                port,
                "anvil_mine",
                json!([format!("{mined_while_down:#x}")]),
            )
            .await?;
            anyhow::ensure!(mined.get("error").is_none(), "anvil_mine: {mined}");
            stop(&mut offline).await?;
        }
        self.resume().await
    }

    /// Stops the node; it dumps its chain to its state file.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        stop(&mut self.child).await
    }

    /// Starts a stopped node again on its own port, from its state file.
    pub async fn resume(&mut self) -> anyhow::Result<()> {
        let (child, _) = spawn(self.chain_id, self.port, &self.options, &self.home).await?;
        self.child = child;
        Ok(())
    }

    /// A JSON-RPC call over HTTP; errors if the node answers with an error.
    pub async fn rpc(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        let answer = self.answer(method, params).await?;
        if let Some(error) = answer.get("error") {
            bail!("{method}: {error}");
        }
        Ok(answer["result"].clone())
    }

    /// The node's whole answer to a call (id 1), error or result.
    pub async fn answer(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        answer(&self.http, self.port, method, params).await
    }

    /// Sends a transaction from an unlocked dev account (anvil signs it
    /// with the account's key); returns its hash.
    pub async fn send(&self, tx: Value) -> anyhow::Result<String> {
        let hash = self.rpc("eth_sendTransaction", json!([tx])).await?;
        hash.as_str()
            .map(str::to_string)
            .context("transaction hash")
    }

    /// Calls the Ping contract at `contract` `count` times from the dev
    /// account; returns the hashes. With automine on, each call gets a
    /// block of its own, mined before this returns: automine is paused
    /// meanwhile and each call mined by hand, as anvil's automine puts two
    /// calls sent back to back in one block now and then. With automine
    /// off, the calls stay pending.
    pub async fn ping(&self, contract: &str, count: usize) -> Vec<String> {
        let automine = self
            .rpc("anvil_getAutomine", json!([]))
            .await
            .expect("whether anvil automines")
            == json!(true);
        if automine {
            self.automine(false).await.expect("automine paused");
        }
        let mut hashes = Vec::new();
        for _ in 0..count {
            let tx = json!({ "from": DEV_ACCOUNT, "to": contract, "data": "0x" });
            hashes.push(self.send(tx).await.expect("a call"));
            if automine {
                self.mine(1).await.expect("the call's block");
            }
        }
        if automine {
            self.automine(true).await.expect("automine resumed");
        }
        hashes
    }

    /// Mines `blocks` empty-or-not blocks.
    pub async fn mine(&self, blocks: u64) -> anyhow::Result<()> {
        self.rpc("anvil_mine", json!([format!("{blocks:#x}")]))
            .await
            .map(drop)
    }

    /// Mines a block and waits until the server `client` is connected to
    /// has it (so `fromBlock` may name it); answers its number.
    pub async fn mine_served(&self, client: &mut WsClient) -> u64 {
        let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
        self.mine(1).await.expect("mine");
        let number = self.block_number().await.expect("a block number");
        client.until_head(&heads, number).await;
        client
            .call("eth_unsubscribe", json!([heads]))
            .await
            .expect("unsubscribe");
        number
    }

    /// Turns automatic mining (one block per transaction) on or off.
    pub async fn automine(&self, on: bool) -> anyhow::Result<()> {
        self.rpc("evm_setAutomine", json!([on])).await.map(drop)
    }

    pub async fn block_number(&self) -> anyhow::Result<u64> {
        let n = self.rpc("eth_blockNumber", json!([])).await?;
        let text = n.as_str().context("block number")?;
        u64::from_str_radix(text.trim_start_matches("0x"), 16).context("hex block number")
    }

    /// The block `number` as the node serves it (transaction hashes only).
    pub async fn block(&self, number: u64) -> anyhow::Result<Value> {
        self.rpc(
            "eth_getBlockByNumber",
            json!([format!("{number:#x}"), false]),
        )
        .await
    }

    /// Replaces the last `depth` blocks with new (empty) ones.
    pub async fn reorg(&self, depth: u64) -> anyhow::Result<()> {
        self.rpc("anvil_reorg", json!([depth, []])).await.map(drop)
    }
}

async fn answer(
    http: &reqwest::Client,
    port: u16,
    method: &str,
    params: Value,
) -> anyhow::Result<Value> {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    http.post(format!("http://127.0.0.1:{port}"))
        .json(&body)
        .send()
        .await
        .with_context(|| format!("calling {method}"))?
        .json()
        .await
        .with_context(|| format!("reading {method}"))
}

/// Stops anvil with SIGTERM (so it dumps its state; SIGKILL would not)
/// and waits for it to exit.
async fn stop(child: &mut Child) -> anyhow::Result<()> {
    let pid = child.id().context("anvil already exited")?;
    let status = Command::new("kill")
        .arg(pid.to_string())
        .status()
        .await
        .context("kill anvil")?;
    if !status.success() {
        bail!("kill {pid} failed");
    }
    tokio::time::timeout(TIMEOUT, child.wait())
        .await
        .context("anvil did not stop")?
        .context("waiting for anvil")?;
    Ok(())
}

/// Starts anvil and waits for the line that gives its port.
async fn spawn(
    chain_id: u64,
    port: u16,
    options: &[String],
    home: &tempfile::TempDir,
) -> anyhow::Result<(Child, u16)> {
    let state = home.path().join("state.json");
    let mut child = Command::new(binary())
        .args([
            "--port",
            &port.to_string(),
            "--chain-id",
            &chain_id.to_string(),
        ])
        .args(options)
        .arg("--state")
        .arg(&state)
        .env("HOME", home.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {} (is tests/js installed?)", binary().display()))?;
    let stdout = child.stdout.take().context("anvil stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let port = tokio::time::timeout(TIMEOUT, async {
        while let Some(line) = lines.next_line().await? {
            if let Some(address) = line.strip_prefix("Listening on ") {
                let port = address
                    .rsplit(':')
                    .next()
                    .context("address without port")?
                    .trim()
                    .parse::<u16>()
                    .context("port number")?;
                return Ok(port);
            }
        }
        bail!("anvil exited before listening")
    })
    .await
    .context("anvil did not start listening")??;
    // Keep draining stdout so anvil never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, port))
}

/// The receipt of `hash` once its block has arrived on the `newHeads`
/// subscription `heads` (so everything before it was processed too), and
/// every notification received meanwhile. Anvil answers
/// `eth_sendTransaction` before its automine block exists, so the receipt
/// is looked up again after each head.
pub async fn mined(
    client: &mut WsClient,
    heads: &str,
    anvil: &Anvil,
    hash: &str,
) -> (Value, Vec<(String, Value)>) {
    let mut newest = 0;
    let mut received = Vec::new();
    loop {
        let receipt = anvil
            .rpc("eth_getTransactionReceipt", json!([hash]))
            .await
            .expect("receipt");
        if !receipt.is_null() && newest >= quantity(&receipt["blockNumber"]) {
            return (receipt, received);
        }
        loop {
            let (sub, result) = client.next_notification().await.expect("a head");
            let head = (sub == heads).then(|| quantity(&result["number"]));
            received.push((sub, result));
            if let Some(head) = head {
                newest = head;
                break;
            }
        }
    }
}

/// A client of the server at `url` following `newHeads`, and the Ping
/// contract deployed through it: (client, its heads subscription, the
/// contract's address).
pub async fn ping_client(url: &str, anvil: &Anvil) -> (WsClient, String, String) {
    let mut client = WsClient::connect(url).await.expect("connect");
    let heads = client.subscribe(json!(["newHeads"])).await.expect("heads");
    let contract = deploy_ping(&mut client, &heads, anvil).await;
    (client, heads, contract)
}

/// Deploys the Ping contract and returns its address once its block has
/// been delivered on `heads`.
pub async fn deploy_ping(client: &mut WsClient, heads: &str, anvil: &Anvil) -> String {
    deploy(client, heads, anvil, &ping_contract()).await
}

/// Deploys `code` (init code, hex) and returns the contract's address once
/// its block has been delivered on `heads`.
pub async fn deploy(client: &mut WsClient, heads: &str, anvil: &Anvil, code: &str) -> String {
    let deploy = anvil
        .send(json!({ "from": DEV_ACCOUNT, "data": code }))
        .await
        .expect("deploy");
    let (receipt, _) = mined(client, heads, anvil, &deploy).await;
    receipt["contractAddress"]
        .as_str()
        .expect("contract address")
        .to_string()
}
