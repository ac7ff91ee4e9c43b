//! Every request example of the README and the book, run against a real
//! server as a reader would paste it (`tests/src/book.rs` says how the
//! examples are read and what an answer is held to).
//!
//! Each page runs on its own servers, one per config it names, started as
//! its examples first need them: the devnet of the api page's "Examples'
//! values" (`genesis_timestamp = 1700000000`, blocks only when asked), so
//! every value is the same at every run; an admin token in `$ADMIN_TOKEN`;
//! and an anvil for a config whose chain reads `ws://127.0.0.1:8545` (with
//! the options of a `$ anvil …` line). A session waiting for a notification
//! after a request mines its chain's next block (the devnet's `evm_mine`,
//! anvil's `anvil_mine`). Commands run in `bash` with the real `curl`, the
//! page's assignments before them.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};
use chainsieve_config::Config;
use chainsieve_tests::anvil::Anvil;
use chainsieve_tests::book::{self, Bindings, Example, Step};
use chainsieve_tests::{TIMEOUT, TestServer, WsClient};
use serde_json::{Value, json};

/// The admin token the examples' `$ADMIN_TOKEN` names.
const ADMIN_TOKEN: &str = "book-examples-admin-token";

/// Where the book's examples say the server and the node listen.
const SERVER: [&str; 2] = ["127.0.0.1:8080", "localhost:8080"];
const NODE: [&str; 2] = ["127.0.0.1:8545", "localhost:8545"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace root")
        .to_path_buf()
}

/// The README and the book's pages, each with its text.
fn pages() -> Vec<(PathBuf, String)> {
    let mut paths = vec![root().join("README.md")];
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root().join("docs/src"))
        .expect("docs/src")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.sort();
    paths.extend(chapters);
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a page");
            (path, text)
        })
        .collect()
}

/// A server an example runs on.
struct Served {
    server: TestServer,
    /// The node's port when the config reads one.
    node: Option<u16>,
}

/// What a page's examples share: its servers and nodes (by config), the
/// values bound so far and the WebSocket URL its requests go to when a
/// block names none.
struct Reader<'a> {
    configs: &'a BTreeMap<String, String>,
    nodes: BTreeMap<Option<String>, Anvil>,
    servers: BTreeMap<Option<String>, Served>,
    bindings: Bindings,
    /// The WebSocket URL of the page's last session on the devnet, which a
    /// block of requests naming none goes to.
    url: String,
    /// The page's shell assignments so far, as a reader's terminal keeps
    /// them.
    assignments: Vec<String>,
}

/// One WebSocket connection of an example, and what it read that no shown
/// answer has taken yet.
struct Session {
    client: WsClient,
    chain: String,
    key: String,
    unread: VecDeque<Value>,
    /// Ids of requests sent and not yet answered, each with whether the
    /// book shows its answer (one it does not show must not be an error).
    sent: Vec<(Value, bool)>,
    /// Whether a block was mined since the last request.
    mined: bool,
}

impl<'a> Reader<'a> {
    fn new(configs: &'a BTreeMap<String, String>) -> Self {
        Self {
            configs,
            nodes: BTreeMap::new(),
            servers: BTreeMap::new(),
            bindings: Bindings::default(),
            url: "ws://127.0.0.1:8080/eth/v1/demo".to_string(),
            assignments: Vec::new(),
        }
    }

    /// The config `name` as the server reads it: the page's (or the
    /// README's) TOML block, its node started if it reads one, with the
    /// examples' devnet and an admin token; and the node's port.
    async fn config(&mut self, name: &Option<String>) -> anyhow::Result<(Config, Option<u16>)> {
        let text = match name {
            Some(name) => self
                .configs
                .get(name)
                .with_context(|| format!("no TOML block of the page or the README is {name}"))?
                .clone(),
            None => String::new(),
        };
        let node = match NODE.iter().find(|at| text.contains(*at)) {
            Some(at) => {
                let port = self.node(name, &text, &[]).await?;
                Some((*at, port))
            }
            None => None,
        };
        let text = match node {
            Some((at, port)) => text.replace(at, &format!("127.0.0.1:{port}")),
            None => text,
        };
        let mut config = Config::from_toml(&text).with_context(|| format!("{name:?}"))?;
        config.devnet.genesis_timestamp = Some(1_700_000_000);
        config.devnet.block_time_ms = Some(3_600_000);
        // A filter call past its deadline loses its batch; a debug build on
        // a busy 2-core machine (the test command runs every test at once)
        // can take longer than the default second, which no reader's
        // release build does.
        config.filters.call_timeout_ms = 10_000;
        config
            .auth
            .admin_token
            .get_or_insert_with(|| ADMIN_TOKEN.to_string());
        Ok((config, node.map(|(_, port)| port)))
    }

    /// The port of the anvil config `name` (of TOML `text`) reads, started
    /// on first use (with `options`, or none).
    async fn node(
        &mut self,
        name: &Option<String>,
        text: &str,
        options: &[String],
    ) -> anyhow::Result<u16> {
        if !self.nodes.contains_key(name) {
            let table: toml::Table = toml::from_str(text).context("the config's TOML")?;
            let chain_id = table
                .get("chains")
                .and_then(toml::Value::as_table)
                .and_then(|chains| chains.values().find_map(|c| c.get("chain_id")))
                .and_then(toml::Value::as_integer)
                .context("the node's chain has a chain_id")?;
            let options: Vec<&str> = options.iter().map(String::as_str).collect();
            let anvil = Anvil::start_with(u64::try_from(chain_id)?, 0, &options).await?;
            self.nodes.insert(name.clone(), anvil);
        }
        Ok(self.nodes[name].port)
    }

    /// The server of config `name`, started on first use.
    async fn server(&mut self, name: &Option<String>) -> anyhow::Result<&Served> {
        if !self.servers.contains_key(name) {
            let (config, node) = self.config(name).await?;
            let chains: Vec<String> = config.chains.keys().cloned().collect();
            let key = config.auth.keys.first().cloned();
            let key = key.unwrap_or_else(|| "demo".to_string());
            let server = TestServer::start(config).await?;
            if node.is_some() {
                // Subscribed to the node, and a block of it in: a `fromBlock`
                // is refused (-32002) until the chain has its first.
                let anvil = &self.nodes[name];
                for chain in &chains {
                    server.wait_live(chain).await;
                    let mut client = WsClient::connect(&server.ws_url(chain, &key)).await?;
                    anvil.mine_served(&mut client).await;
                }
            }
            self.servers.insert(name.clone(), Served { server, node });
        }
        Ok(&self.servers[name])
    }

    /// `text` as run: bound values in, the example's addresses ours (a
    /// server is started when the text names it, not before).
    async fn localized(&mut self, config: &Option<String>, text: &str) -> anyhow::Result<String> {
        let mut text = self.bindings.apply(text);
        if NODE.iter().any(|at| text.contains(at)) {
            let (_, port) = self.config(config).await?;
            let port = port.context("a node's address in a config that reads none")?;
            for at in NODE {
                text = text.replace(at, &format!("127.0.0.1:{port}"));
            }
        }
        if SERVER.iter().any(|at| text.contains(at)) {
            let addr = self.server(config).await?.server.addr.to_string();
            for at in SERVER {
                text = text.replace(at, &addr);
            }
        }
        Ok(text)
    }

    async fn run(&mut self, example: &Example) -> anyhow::Result<()> {
        let mut session: Option<Session> = None;
        for (at, step) in example.steps.iter().enumerate() {
            match step {
                Step::Start => {
                    self.server(&example.config).await?;
                }
                Step::Node(options) => {
                    let name = &example.config;
                    let text = self
                        .configs
                        .get(name.as_deref().unwrap_or_default())
                        .cloned();
                    let text = text.context("`anvil` in a block naming no config")?;
                    self.node(name, &text, options).await?;
                }
                Step::Connect(url) => {
                    if let Some(mut done) = session.take() {
                        done.settle().await?;
                    }
                    if example.config.is_none() {
                        self.url = url.clone();
                    }
                    session = Some(self.connect(&example.config, url).await?);
                }
                Step::Send(request) => {
                    if session.is_none() {
                        let url = self.url.clone();
                        session = Some(self.connect(&example.config, &url).await?);
                    }
                    let request = self.localized(&example.config, request).await?;
                    let session = session.as_mut().expect("connected");
                    let sent: Value = serde_json::from_str(&request)
                        .with_context(|| format!("the request {request} is JSON"))?;
                    if let Some(id) = sent.get("id") {
                        let shown = answer_shown(&example.steps[at + 1..], id);
                        session.sent.push((id.clone(), shown));
                    }
                    // What it subscribes to comes with the next block.
                    session.mined = false;
                    session.client.send_text(&request).await;
                }
                Step::Expect(shown) => {
                    let session = session.as_mut().context("an answer before any request")?;
                    let shown = book::pattern(shown).map_err(anyhow::Error::msg)?;
                    if shown.get("id").is_none() && !session.mined {
                        // Every request answered first: a subscription made
                        // after the block would miss it.
                        session.settle().await?;
                        let miner = self.miner(&example.config).await?;
                        miner.mine(&session.chain, &session.key).await?;
                        session.mined = true;
                    }
                    session.expect(&shown, &mut self.bindings).await?;
                }
                Step::Assign(line) => {
                    let line = self.localized(&example.config, line).await?;
                    self.assignments.push(line);
                }
                Step::Command { line, shown } => {
                    let line = self.localized(&example.config, line).await?;
                    let (config, _) = self.config(&example.config).await?;
                    let token = config.auth.admin_token.unwrap_or_default();
                    let printed = command(&self.assignments, &line, &token).await?;
                    let answer: Value = serde_json::from_str(&printed)
                        .with_context(|| format!("`{line}` printed JSON: {printed:?}"))?;
                    match shown {
                        Some(shown) => {
                            let shown = book::pattern(shown).map_err(anyhow::Error::msg)?;
                            let mut trial = self.bindings.clone();
                            book::check(&shown, &answer, &mut trial)
                                .map_err(|e| anyhow::anyhow!("`{line}` printed {answer}: {e}"))?;
                            self.bindings = trial;
                        }
                        None => ensure!(
                            answer.get("error").is_none(),
                            "`{line}` printed an error: {answer}"
                        ),
                    }
                }
            }
        }
        if let Some(mut done) = session {
            done.settle().await?;
        }
        Ok(())
    }

    /// Opens `url`.
    async fn connect(&mut self, config: &Option<String>, url: &str) -> anyhow::Result<Session> {
        let url = self.localized(config, url).await?;
        let path = url.split('/').skip(3).collect::<Vec<_>>();
        let (chain, key) = match path.as_slice() {
            [chain, "v1", key] => (chain.to_string(), key.to_string()),
            ["v1", key] => ("eth".to_string(), key.to_string()),
            _ => bail!("{url} is not a chain's URL"),
        };
        Ok(Session {
            client: WsClient::connect(&url).await?,
            chain,
            key,
            unread: VecDeque::new(),
            sent: Vec::new(),
            mined: false,
        })
    }

    /// How a session's chain mines its next block: the devnet's `evm_mine`
    /// over the server's HTTP, or anvil's `anvil_mine`.
    async fn miner(&mut self, config: &Option<String>) -> anyhow::Result<Miner> {
        let served = self.server(config).await?;
        Ok(match served.node {
            Some(port) => Miner::Node(format!("http://127.0.0.1:{port}")),
            None => Miner::Devnet(format!("http://{}", served.server.addr)),
        })
    }
}

/// Whether `steps` (those after a request of id `id`, to the end of its
/// session) show its answer.
fn answer_shown(steps: &[Step], id: &Value) -> bool {
    steps
        .iter()
        .take_while(|step| !matches!(step, Step::Connect(_)))
        .any(|step| match step {
            Step::Expect(text) => {
                book::pattern(text).is_ok_and(|shown| shown.get("id") == Some(id))
            }
            _ => false,
        })
}

/// Where a session's next block comes from.
enum Miner {
    Devnet(String),
    Node(String),
}

impl Miner {
    async fn mine(&self, chain: &str, key: &str) -> anyhow::Result<()> {
        let (url, method) = match self {
            Miner::Devnet(base) => (format!("{base}/{chain}/v1/{key}"), "evm_mine"),
            Miner::Node(url) => (url.clone(), "anvil_mine"),
        };
        let answer: Value = reqwest::Client::new()
            .post(&url)
            .timeout(TIMEOUT)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": []}))
            .send()
            .await
            .with_context(|| format!("{method} at {url}"))?
            .json()
            .await?;
        ensure!(answer.get("error").is_none(), "{method}: {answer}");
        Ok(())
    }
}

impl Session {
    /// Takes the message that `shown` shows: the answer of the request of
    /// its id, or a notification: the first not yet taken of one of the
    /// subscriptions (never a later one of a subscription before its first:
    /// each subscription's notifications come in order, those of several
    /// interleave).
    async fn expect(&mut self, shown: &Value, bindings: &mut Bindings) -> anyhow::Result<()> {
        let id = shown.get("id").cloned();
        let mut tried = Vec::new();
        let mut index = 0;
        // The subscriptions whose first untaken notification was passed over.
        let mut passed: Vec<Value> = Vec::new();
        loop {
            if index == self.unread.len() {
                let payload = self
                    .client
                    .next_payload()
                    .await
                    .with_context(|| format!("waiting for {shown}; read: {tried:#?}"))?;
                self.unread.push_back(serde_json::from_slice(&payload)?);
            }
            let message = &self.unread[index];
            index += 1;
            let candidate = match &id {
                Some(id) => message.get("id") == Some(id),
                None if message.get("method") == Some(&json!("eth_subscription")) => {
                    let subscription = message["params"]["subscription"].clone();
                    let first = !passed.contains(&subscription);
                    passed.push(subscription);
                    first
                }
                None => false,
            };
            if !candidate {
                continue;
            }
            let mut trial = bindings.clone();
            match book::check(shown, message, &mut trial) {
                Ok(()) => {
                    *bindings = trial;
                    let taken = self.unread.remove(index - 1);
                    if let (Some(id), Some(_)) = (&id, taken) {
                        self.answered(id);
                    }
                    return Ok(());
                }
                Err(e) if id.is_some() => bail!("{message}: {e}"),
                Err(e) => tried.push(format!("{message}: {e}")),
            }
        }
    }

    /// Forgets the request `id` (its answer was taken).
    fn answered(&mut self, id: &Value) {
        if let Some(at) = self.sent.iter().position(|(sent, _)| sent == id) {
            self.sent.remove(at);
        }
    }

    /// Reads until every request sent is answered; an answer the book does
    /// not show must not be an error (one it shows is left for its
    /// [`Session::expect`]).
    async fn settle(&mut self) -> anyhow::Result<()> {
        let mut at = 0;
        while let Some((id, shown)) = self.sent.get(at).cloned() {
            match self.unread.iter().position(|m| m.get("id") == Some(&id)) {
                Some(_) if shown => at += 1,
                Some(found) => {
                    let answer = self.unread.remove(found).expect("present");
                    ensure!(answer.get("error").is_none(), "an error answered: {answer}");
                    self.sent.remove(at);
                }
                None => {
                    let payload = self.client.next_payload().await?;
                    self.unread.push_back(serde_json::from_slice(&payload)?);
                }
            }
        }
        Ok(())
    }
}

/// Runs `line` in bash after `assignments`, with `$ADMIN_TOKEN` set to
/// `token`, and answers what it printed.
async fn command(assignments: &[String], line: &str, token: &str) -> anyhow::Result<String> {
    let script = format!("set -e\n{}\n{line}\n", assignments.join("\n"));
    let run = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("ADMIN_TOKEN", token)
        .current_dir(root())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(TIMEOUT, run)
        .await
        .with_context(|| format!("`{line}` ended in time"))?
        .with_context(|| format!("running `{line}`"))?;
    ensure!(
        output.status.success(),
        "`{line}` failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?.trim().to_string())
}

/// How many examples each page holds: one that stops being read (a form
/// the reader no longer knows) fails here, not silently.
const EXAMPLES: &[(&str, usize)] = &[
    ("README.md", 6),
    ("docs/src/api.md", 23),
    ("docs/src/filters.md", 2),
    ("docs/src/getting-started.md", 3),
    ("docs/src/operations.md", 2),
    ("docs/src/watchlists.md", 6),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_example_of_the_book_answers_as_shown() {
    let pages: Vec<(String, book::Page)> = pages()
        .iter()
        .map(|(path, text)| {
            let name = path
                .strip_prefix(root())
                .unwrap_or(path)
                .display()
                .to_string();
            (name, book::examples(path, text))
        })
        .collect();
    let readme = &pages[0].1.configs;
    let mut failures = Vec::new();
    let mut counted = Vec::new();
    for (name, page) in &pages {
        failures.extend(
            page.unread
                .iter()
                .map(|line| format!("{name}:{line}: a block of requests no example form reads")),
        );
        if !page.examples.is_empty() {
            counted.push((name.as_str(), page.examples.len()));
        }
        let mut configs = readme.clone();
        configs.extend(page.configs.clone());
        let mut reader = Reader::new(&configs);
        for example in &page.examples {
            if let Err(error) = reader.run(example).await {
                failures.push(format!("{name}:{}: {error:#}", example.line));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert_eq!(counted, EXAMPLES, "examples per page");
}
