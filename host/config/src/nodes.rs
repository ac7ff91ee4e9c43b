//! Where a chain's data comes from: the devnet, or one node or several
//! (`chains.<name>.source`, `[[chains.<name>.nodes]]`), and how several
//! nodes agree on one chain (docs/src/nodes.md, Several nodes per chain).

use std::time::Duration;

use anyhow::bail;
use serde::{Deserialize, Serialize};

use super::Span;

/// A chain's section (`[chains.<name>]`): its id, its source and how its
/// nodes agree, its window, where its price history starts.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ChainConfig {
    /// Required for chains other than eth (1), bsc (56) and polygon (137).
    pub chain_id: Option<u64>,
    pub source: SourceConfig,
    /// The nodes as tables (`[[chains.<name>.nodes]]`), instead of URLs in
    /// `source`, when a node needs a setting of its own.
    pub nodes: Vec<NodeConfig>,
    /// How several nodes agree on a block before it goes out.
    pub agreement: Agreement,
    /// With `agreement = "quorum"`: the nodes that must have a block;
    /// unset: a majority of them.
    pub quorum: Option<u64>,
    /// A node further behind the chain than this many blocks is lagging.
    pub lag_blocks: u64,
    /// A node with no new head for this many block times is stalled.
    pub stall_blocks: u32,
    /// Heads in a row, each at or past the chain's, that a node set aside
    /// announces before it counts again.
    pub rejoin_heads: u32,
    /// How far back recent blocks are kept for reorg handling and block
    /// lookups: blocks, or a span of time at the chain's cadence.
    pub window: Option<Span>,
    /// Node chains: fill `token_price` history from this block up to where
    /// the index starts, by `eth_getLogs` (resumed after a restart).
    pub price_from_block: Option<u64>,
}

impl Default for ChainConfig {
    fn default() -> Self {
        Self {
            chain_id: None,
            source: SourceConfig::Devnet,
            nodes: Vec::new(),
            agreement: Agreement::First,
            quorum: None,
            lag_blocks: DEFAULT_LAG_BLOCKS,
            stall_blocks: DEFAULT_STALL_BLOCKS,
            rejoin_heads: DEFAULT_REJOIN_HEADS,
            window: None,
            price_from_block: None,
        }
    }
}

/// Blocks a node may fall behind the chain before it is taken for lagging.
pub const DEFAULT_LAG_BLOCKS: u64 = 3;

/// Block times without a new head after which a node is taken for stalled.
pub const DEFAULT_STALL_BLOCKS: u32 = 3;

/// A stall is never called sooner than this, whatever the block time
/// (a 0.45 s chain's heads arrive in bursts of a few hundred milliseconds).
pub const MIN_STALL: Duration = Duration::from_secs(1);

/// Heads in a row, each at or past the chain's, that a node sets aside
/// must announce before it counts again.
pub const DEFAULT_REJOIN_HEADS: u32 = 3;

/// `chains.<name>.source`: `"devnet"`, a node's URL, or a list of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SourceConfig {
    /// The embedded devnet generator.
    #[default]
    Devnet,
    /// Nodes' WebSocket JSON-RPC endpoints.
    Nodes(Vec<String>),
}

impl SourceConfig {
    /// One node at `url`.
    pub fn node(url: impl Into<String>) -> Self {
        SourceConfig::Nodes(vec![url.into()])
    }
}

impl Serialize for SourceConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SourceConfig::Devnet => s.serialize_str("devnet"),
            SourceConfig::Nodes(urls) if urls.len() == 1 => s.serialize_str(&urls[0]),
            SourceConfig::Nodes(urls) => urls.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for SourceConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            One(String),
            List(Vec<String>),
        }
        let refuse = |got: &str| {
            serde::de::Error::custom(format!(
                "source must be \"devnet\", a ws:// or wss:// URL, or a list of them, got \"{got}\""
            ))
        };
        let urls = match Written::deserialize(d)? {
            Written::One(text) if text == "devnet" => return Ok(SourceConfig::Devnet),
            Written::One(url) => vec![url],
            Written::List(urls) if urls.is_empty() => return Err(refuse("[]")),
            Written::List(urls) => urls,
        };
        match urls.iter().find(|url| !is_ws_url(url)) {
            Some(bad) => Err(refuse(bad)),
            None => Ok(SourceConfig::Nodes(urls)),
        }
    }
}

fn is_ws_url(url: &str) -> bool {
    url.starts_with("ws://") || url.starts_with("wss://")
}

/// One node of a chain, as a `[[chains.<name>.nodes]]` table writes it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// The node's WebSocket JSON-RPC endpoint.
    pub url: String,
    /// How logs, `/readyz` and `/metrics` name it; unset: its host and port.
    pub name: Option<String>,
}

/// How several nodes agree on the chain's blocks.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Agreement {
    /// A block goes out as soon as any node announces it; a branch most
    /// nodes then build on instead replaces it (a reorg).
    #[default]
    First,
    /// A block goes out once `quorum` nodes have announced it or a block
    /// built on it.
    Quorum,
}

/// Where a chain reads, as the server runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceSpec {
    Devnet,
    Nodes(NodesSpec),
}

impl SourceSpec {
    /// The chain's nodes; none for the devnet.
    pub fn nodes(&self) -> &[NodeSpec] {
        match self {
            SourceSpec::Devnet => &[],
            SourceSpec::Nodes(spec) => &spec.nodes,
        }
    }
}

/// A node chain's nodes and the rules they are held to, defaults resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodesSpec {
    pub nodes: Vec<NodeSpec>,
    /// Nodes that must have a block before it goes out: 1 for
    /// [`Agreement::First`].
    pub quorum: usize,
    pub lag_blocks: u64,
    /// No head for this long: stalled.
    pub stall_after: Duration,
    pub rejoin_heads: u32,
}

/// One node, named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub url: String,
}

impl NodeSpec {
    pub fn new(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            url: url.into(),
        }
    }
}

/// Resolves chain `name`'s source; `block_time` sets the stall threshold.
pub(super) fn source(
    name: &str,
    chain: &ChainConfig,
    block_time: Duration,
) -> anyhow::Result<SourceSpec> {
    let key = |key: &str| format!("chains.{name}.{key}");
    let nodes: Vec<NodeConfig> = match (&chain.source, chain.nodes.is_empty()) {
        (SourceConfig::Devnet, true) => {
            if chain.agreement != Agreement::First || chain.quorum.is_some() {
                bail!(
                    "{} and {} apply to node chains; chain {name} runs on the devnet",
                    key("agreement"),
                    key("quorum")
                );
            }
            return Ok(SourceSpec::Devnet);
        }
        (SourceConfig::Devnet, false) => chain.nodes.clone(),
        (SourceConfig::Nodes(urls), true) => urls
            .iter()
            .map(|url| NodeConfig {
                url: url.clone(),
                name: None,
            })
            .collect(),
        (SourceConfig::Nodes(_), false) => bail!(
            "chain {name} names its nodes twice: set {} or [[{}]], not both",
            key("source"),
            key("nodes")
        ),
    };
    // Each node's key in the file: an entry of [[chains.<name>.nodes]]
    // (`listed`), or of `source`.
    let listed = !chain.nodes.is_empty();
    let entry = |index: usize| {
        if listed {
            key(&format!("nodes[{index}]"))
        } else if nodes.len() == 1 {
            key("source")
        } else {
            key(&format!("source[{index}]"))
        }
    };
    let url_key = |index: usize| {
        if listed {
            format!("{}.url", entry(index))
        } else {
            entry(index)
        }
    };
    let mut specs: Vec<NodeSpec> = Vec::with_capacity(nodes.len());
    for (index, node) in nodes.iter().enumerate() {
        if node.url.is_empty() {
            let at = url_key(index);
            return Err(super::located::invalid(
                at.clone(),
                format!(
                    "{at} is missing: each [[{}]] entry needs a ws:// or wss:// url",
                    key("nodes")
                ),
            ));
        }
        if !is_ws_url(&node.url) {
            let at = url_key(index);
            return Err(super::located::invalid(
                at.clone(),
                format!("{at} must be a ws:// or wss:// URL, got \"{}\"", node.url),
            ));
        }
        let spec = NodeSpec::new(
            node.name
                .clone()
                .unwrap_or_else(|| host_and_port(&node.url)),
            node.url.clone(),
        );
        if specs
            .iter()
            .any(|s| s.name == spec.name || s.url == spec.url)
        {
            return Err(super::located::invalid(
                entry(index),
                format!(
                    "{}: chain {name} lists node \"{}\" ({}) twice; give each node its own url and name",
                    entry(index),
                    spec.name,
                    spec.url
                ),
            ));
        }
        specs.push(spec);
    }
    let majority = specs.len() / 2 + 1;
    let quorum = match (chain.agreement, chain.quorum) {
        (Agreement::First, None) => 1,
        (Agreement::First, Some(_)) => bail!(
            "{} applies with {} = \"quorum\"",
            key("quorum"),
            key("agreement")
        ),
        (Agreement::Quorum, quorum) => {
            let quorum = quorum.unwrap_or(majority as u64);
            super::located::in_range(&key("quorum"), quorum, 1, specs.len() as u64)?;
            usize::try_from(quorum).unwrap_or(usize::MAX)
        }
    };
    super::located::in_range(&key("lag_blocks"), chain.lag_blocks, 1, 1_000_000)?;
    super::located::in_range(
        &key("stall_blocks"),
        u64::from(chain.stall_blocks),
        1,
        10_000,
    )?;
    super::located::in_range(
        &key("rejoin_heads"),
        u64::from(chain.rejoin_heads),
        1,
        10_000,
    )?;
    Ok(SourceSpec::Nodes(NodesSpec {
        nodes: specs,
        quorum,
        lag_blocks: chain.lag_blocks,
        stall_after: (block_time * chain.stall_blocks).max(MIN_STALL),
        rejoin_heads: chain.rejoin_heads,
    }))
}

/// `host:port` of a URL, the name a node goes by unless given one.
fn host_and_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    // Credentials stay out of logs and metrics.
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(text: &str) -> anyhow::Result<SourceSpec> {
        let chain: ChainConfig = toml::from_str(text)?;
        source("eth", &chain, Duration::from_secs(12))
    }

    fn nodes(text: &str) -> NodesSpec {
        match chain(text).expect("valid") {
            SourceSpec::Nodes(spec) => spec,
            SourceSpec::Devnet => panic!("a node chain"),
        }
    }

    #[test]
    fn one_url_is_one_node_agreeing_with_itself() {
        let spec = nodes(r#"source = "ws://user:secret@node-a:8546/path""#);
        assert_eq!(
            spec.nodes,
            [NodeSpec::new(
                "node-a:8546",
                "ws://user:secret@node-a:8546/path"
            )]
        );
        assert_eq!(spec.quorum, 1);
        assert_eq!(spec.stall_after, Duration::from_secs(36));
        assert_eq!(
            (spec.lag_blocks, spec.rejoin_heads),
            (DEFAULT_LAG_BLOCKS, DEFAULT_REJOIN_HEADS)
        );
    }

    #[test]
    fn a_list_or_tables_name_several_nodes() {
        let listed = nodes(r#"source = ["ws://a:1", "wss://b:2"]"#);
        assert_eq!(listed.nodes.len(), 2);
        let tabled = nodes(
            r#"
            agreement = "quorum"
            [[nodes]]
            url = "ws://a:1"
            name = "primary"
            [[nodes]]
            url = "ws://b:2"
            [[nodes]]
            url = "ws://c:3"
            "#,
        );
        assert_eq!(tabled.nodes[0], NodeSpec::new("primary", "ws://a:1"));
        assert_eq!(tabled.nodes[2].name, "c:3");
        assert_eq!(tabled.quorum, 2, "a majority by default");
    }

    #[test]
    fn the_stall_threshold_is_block_times_but_never_under_a_second() {
        let chain: ChainConfig = toml::from_str(r#"source = "ws://a:1""#).expect("toml");
        let SourceSpec::Nodes(fast) =
            source("bsc", &chain, Duration::from_millis(100)).expect("valid")
        else {
            panic!("a node chain");
        };
        assert_eq!(fast.stall_after, MIN_STALL);
    }

    #[test]
    fn what_cannot_work_is_refused_naming_the_key() {
        for (text, says) in [
            (r#"source = []"#, "source must be"),
            (r#"source = ["ws://a:1", "http://b"]"#, "\"http://b\""),
            (
                "source = \"ws://a:1\"\n[[nodes]]\nurl = \"ws://b:1\"",
                "names its nodes twice",
            ),
            (r#"source = ["ws://a:1", "ws://a:1"]"#, "twice"),
            (
                "agreement = \"quorum\"\nquorum = 3\nsource = [\"ws://a:1\", \"ws://b:1\"]",
                "chains.eth.quorum must be between 1 and 2, got 3",
            ),
            (
                "quorum = 1\nsource = \"ws://a:1\"",
                "chains.eth.quorum applies with chains.eth.agreement = \"quorum\"",
            ),
            ("agreement = \"quorum\"", "apply to node chains"),
            (
                "[[nodes]]\nurl = \"a:1\"",
                "chains.eth.nodes[0].url must be",
            ),
            (
                "[[nodes]]\nurl = \"ws://a:1\"\n[[nodes]]\nname = \"b\"",
                "chains.eth.nodes[1].url is missing",
            ),
            (
                "source = \"ws://a:1\"\nlag_blocks = 0",
                "chains.eth.lag_blocks",
            ),
            ("agreement = \"most\"", "unknown variant"),
        ] {
            let error = format!("{:#}", chain(text).expect_err(text));
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
