//! **Tests only.** A filter component that misbehaves on request, to prove
//! the host's isolation: a subscription's parameters pick what the next
//! `match-batch` does —
//!
//! - `[{"do": "loop"}]`: spins forever (the call deadline must stop it);
//! - `[{"do": "grow"}]`: allocates without bound (the memory cap must stop it);
//! - `[{"do": "panic"}]`: panics (a trap);
//! - `[{"do": "panic", "at_block": N}]`: panics on a batch holding block N
//!   only (heads), a one-off failure the host must recover from;
//! - anything else (`[]`): an ordinary subscription that receives every
//!   event (every even block with `only_even`, see below).
//!
//! What the component declares is read at run time from [`CONFIG`], a JSON
//! object padded with spaces behind a marker, so a test can patch the built
//! `.wasm` (same length, still a valid component) into a component of any
//! topic and source: `{"topic": "evil", "source": "heads"}` by default, plus
//! `"only_even": true` (heads: deliver even block numbers only) and
//! `"refuse": true` (refuse every subscription). `chainsieve-tests`'
//! `evil_filter` does the patching.
//!
//! Written against the raw bindings rather than `export_filter!`: its
//! manifest is not a constant.

use chainsieve_filter_sdk::serde_json::{self, Value};
use chainsieve_filter_sdk::{Batch, LayoutError, Source};

/// What precedes the configuration in the component's data.
pub const CONFIG_MARKER: &[u8] = b"CHAINSIEVE-EVIL-FILTER-CONFIG:";
/// Bytes reserved for the configuration JSON after the marker.
pub const CONFIG_LEN: usize = 256;

/// The patchable configuration: marker, JSON, space padding.
#[used]
pub static CONFIG: [u8; CONFIG_MARKER.len() + CONFIG_LEN] =
    padded(br#"{"topic":"evil","source":"heads"}"#);

const fn padded(json: &[u8]) -> [u8; CONFIG_MARKER.len() + CONFIG_LEN] {
    let mut out = [b' '; CONFIG_MARKER.len() + CONFIG_LEN];
    let mut i = 0;
    while i < CONFIG_MARKER.len() {
        out[i] = CONFIG_MARKER[i];
        i += 1;
    }
    let mut j = 0;
    while j < json.len() {
        out[CONFIG_MARKER.len() + j] = json[j];
        j += 1;
    }
    out
}

/// The configuration as the component sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub topic: String,
    pub source: Source,
    pub only_even: bool,
    pub refuse: bool,
}

impl Config {
    /// Reads [`CONFIG`] through a pointer the optimizer cannot see through,
    /// so the default is not folded in and a patched file takes effect.
    pub fn read() -> Self {
        let config: &[u8] = std::hint::black_box(&CONFIG[..]);
        Self::parse(&config[CONFIG_MARKER.len()..])
    }

    /// Parses the JSON part; a broken patch falls back to the defaults with
    /// a topic that says so.
    pub fn parse(bytes: &[u8]) -> Self {
        let value: Value = serde_json::from_slice(bytes.trim_ascii()).unwrap_or(Value::Null);
        let source = match value["source"].as_str() {
            Some("pending-transactions") => Source::PendingTransactions,
            Some("mined-transactions") => Source::MinedTransactions,
            Some("logs") => Source::Logs,
            _ => Source::Heads,
        };
        Self {
            topic: value["topic"]
                .as_str()
                .unwrap_or("evilBrokenConfig")
                .to_string(),
            source,
            only_even: value["only_even"].as_bool().unwrap_or(false),
            refuse: value["refuse"].as_bool().unwrap_or(false),
        }
    }
}

/// What a subscription asks the component to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    Normal,
    Loop,
    Grow,
    Panic,
    PanicAtBlock(u64),
}

impl Behaviour {
    pub fn from_params(params: &str) -> Self {
        let value: Value = serde_json::from_str(params).unwrap_or(Value::Null);
        match value[0]["do"].as_str() {
            Some("loop") => Behaviour::Loop,
            Some("grow") => Behaviour::Grow,
            Some("panic") => match value[0]["at_block"].as_u64() {
                Some(block) => Behaviour::PanicAtBlock(block),
                None => Behaviour::Panic,
            },
            _ => Behaviour::Normal,
        }
    }
}

/// The component's state: its subscriptions in order.
#[derive(Debug, Default)]
pub struct Evil {
    subscriptions: Vec<(u64, Behaviour)>,
}

impl Evil {
    pub fn subscribe(&mut self, config: &Config, id: u64, params: &str) -> Result<(), String> {
        if config.refuse {
            return Err(format!("{} refuses every subscription", config.topic));
        }
        self.subscriptions.retain(|(other, _)| *other != id);
        self.subscriptions
            .push((id, Behaviour::from_params(params)));
        Ok(())
    }

    pub fn unsubscribe(&mut self, id: u64) {
        self.subscriptions.retain(|(other, _)| *other != id);
    }

    /// Misbehaves if a subscription asked for it, else matches every event
    /// (every even head with `only_even`) to every subscription.
    pub fn match_batch(
        &self,
        config: &Config,
        bytes: &[u8],
    ) -> Result<(Vec<u32>, Vec<u64>), LayoutError> {
        let batch = Batch::parse(bytes)?;
        for (_, behaviour) in &self.subscriptions {
            match behaviour {
                Behaviour::Normal => {}
                Behaviour::Loop => spin(),
                Behaviour::Grow => grow(),
                Behaviour::Panic => panic!("evil filter: panic requested"),
                Behaviour::PanicAtBlock(block) => {
                    if batch.source() == Source::Heads
                        && batch.heads()?.any(|h| h.number() == *block)
                    {
                        panic!("evil filter: panic requested at block {block}")
                    }
                }
            }
        }
        let wanted: Vec<bool> = match batch.source() {
            Source::Heads if config.only_even => {
                batch.heads()?.map(|h| h.number() % 2 == 0).collect()
            }
            _ => vec![true; batch.len()],
        };
        let mut events = Vec::new();
        let mut subscriptions = Vec::new();
        for (index, _) in wanted.iter().enumerate().filter(|(_, w)| **w) {
            for (id, _) in &self.subscriptions {
                events.push(index as u32);
                subscriptions.push(*id);
            }
        }
        Ok((events, subscriptions))
    }
}

/// Never returns; only an interruption from outside ends it.
fn spin() -> ! {
    let mut n = 0u64;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// Allocates 1 MiB after 1 MiB, touching each, until the allocator fails.
fn grow() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(vec![1u8; 1 << 20]);
        std::hint::black_box(&hoard);
    }
}

#[cfg(target_arch = "wasm32")]
mod component {
    use std::cell::RefCell;

    use chainsieve_filter_sdk::Source;
    use chainsieve_filter_sdk::bindings::chainsieve::filter::types as wit;

    use super::{Config, Evil};

    thread_local! {
        static CONFIG: Config = Config::read();
        static STATE: RefCell<Evil> = RefCell::new(Evil::default());
    }

    struct Component;

    impl chainsieve_filter_sdk::bindings::Guest for Component {
        fn manifest() -> wit::Manifest {
            CONFIG.with(|config| wit::Manifest {
                topic: config.topic.clone(),
                source: match config.source {
                    Source::PendingTransactions => wit::Source::PendingTransactions,
                    Source::MinedTransactions => wit::Source::MinedTransactions,
                    Source::Heads => wit::Source::Heads,
                    Source::Logs => wit::Source::Logs,
                    Source::Lifecycle => {
                        unreachable!("the evil filter's config names no lifecycle source")
                    }
                },
                payload: wit::Payload::Full,
            })
        }

        fn subscribe(id: u64, params: String) -> Result<wit::Payload, String> {
            CONFIG
                .with(|config| STATE.with_borrow_mut(|evil| evil.subscribe(config, id, &params)))
                .map(|()| wit::Payload::Full)
        }

        fn unsubscribe(id: u64) {
            STATE.with_borrow_mut(|evil| evil.unsubscribe(id))
        }

        fn match_batch(batch: Vec<u8>) -> Result<wit::Matches, String> {
            CONFIG
                .with(|config| STATE.with_borrow(|evil| evil.match_batch(config, &batch)))
                .map(|(events, subscriptions)| wit::Matches {
                    events,
                    subscriptions,
                })
                .map_err(|e| e.to_string())
        }
    }

    chainsieve_filter_sdk::bindings::__export_filter_world!(Component with_types_in chainsieve_filter_sdk::bindings);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_config_reads_back() {
        assert_eq!(
            Config::read(),
            Config {
                topic: "evil".into(),
                source: Source::Heads,
                only_even: false,
                refuse: false,
            }
        );
    }

    #[test]
    fn params_pick_the_behaviour() {
        assert_eq!(
            Behaviour::from_params(r#"[{"do":"loop"}]"#),
            Behaviour::Loop
        );
        assert_eq!(
            Behaviour::from_params(r#"[{"do":"grow"}]"#),
            Behaviour::Grow
        );
        assert_eq!(
            Behaviour::from_params(r#"[{"do":"panic"}]"#),
            Behaviour::Panic
        );
        assert_eq!(
            Behaviour::from_params(r#"[{"do":"panic","at_block":7}]"#),
            Behaviour::PanicAtBlock(7)
        );
        assert_eq!(Behaviour::from_params("[]"), Behaviour::Normal);
    }

    #[test]
    fn refusing_config_refuses() {
        let config = Config::parse(br#"{"topic":"x","refuse":true}"#);
        assert!(Evil::default().subscribe(&config, 1, "[]").is_err());
    }
}
