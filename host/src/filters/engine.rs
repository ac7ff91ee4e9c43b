//! The process's one wasmtime [`Engine`], compiling and instantiating filter
//! components with per-call deadlines (epoch interruption) and a memory cap
//! per instance.

use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::Duration;

use anyhow::{Context, anyhow};
use chainsieve_filter_sdk::{Matches, Payload, Source};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::v0_1_0::chainsieve::filter::types as wit;
use super::v0_1_0::{Filter, FilterPre};
use crate::config::FiltersConfig;

/// How often the epoch advances; a call's deadline is a whole number of ticks.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The process-wide engine: compiled components belong to an engine, so one
/// engine lets every server in the process (tests start many) share them.
/// Engine and ticker are made inside one `get_or_init`, so racing callers
/// cannot start two tickers (which would halve every deadline).
fn shared_engine() -> anyhow::Result<&'static Engine> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| start_engine().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow!("{e}"))
}

/// The engine, and the thread that advances its epoch until it is gone.
fn start_engine() -> anyhow::Result<Engine> {
    let mut config = Config::new();
    config.epoch_interruption(true);
    // Measured (DESIGN.md): component-model async support adds ~650 ns to
    // every call, and filters never need it.
    config.concurrency_support(false);
    let engine = anyhow_result(Engine::new(&config)).context("configuring the wasmtime engine")?;
    let weak = engine.weak();
    thread::Builder::new()
        .name("filter-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                thread::sleep(EPOCH_TICK);
            }
        })
        .context("starting the epoch ticker")?;
    Ok(engine)
}

/// What a component says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterManifest {
    pub topic: String,
    pub source: Source,
    pub payload: Payload,
}

/// Per-instance state: WASI (guests built for wasm32-wasip2 import it
/// through std) and the memory cap.
pub struct FilterState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
}

impl WasiView for FilterState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Compiles and instantiates filter components.
pub struct FilterEngine {
    engine: &'static Engine,
    linker: Linker<FilterState>,
    deadline_ticks: u64,
    memory_limit: usize,
}

/// A compiled, linked component and its manifest, ready to instantiate.
#[derive(Clone)]
pub struct FilterComponent {
    pub manifest: FilterManifest,
    /// Where it came from: `built-in <file>` or the file's path.
    pub origin: String,
    pre: FilterPre<FilterState>,
}

impl std::fmt::Debug for FilterComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterComponent")
            .field("manifest", &self.manifest)
            .field("origin", &self.origin)
            .finish()
    }
}

impl FilterEngine {
    pub fn new(config: &FiltersConfig) -> anyhow::Result<Arc<Self>> {
        let engine = shared_engine()?;
        let mut linker = Linker::new(engine);
        anyhow_result(wasmtime_wasi::p2::add_to_linker_sync(&mut linker))
            .context("linking WASI into the filter linker")?;
        let deadline_ticks = config
            .call_timeout()
            .as_millis()
            .div_ceil(EPOCH_TICK.as_millis())
            .max(1) as u64;
        let memory_limit =
            usize::try_from(config.memory_limit_mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
        Ok(Arc::new(Self {
            engine,
            linker,
            deadline_ticks,
            memory_limit,
        }))
    }

    /// Compiles `bytes` (named `origin` in messages), checks it implements
    /// the filter world, and reads its manifest.
    pub fn load(&self, origin: &str, bytes: &[u8]) -> anyhow::Result<FilterComponent> {
        let component =
            compiled(self.engine, bytes).with_context(|| format!("compiling {origin}"))?;
        let pre = anyhow_result(self.linker.instantiate_pre(&component)).with_context(|| {
            format!("linking {origin} (it may import something the host does not provide)")
        })?;
        let pre = anyhow_result(FilterPre::new(pre)).with_context(|| {
            format!("{origin} does not export the chainsieve:filter@0.1.0 world")
        })?;
        let mut instance = self
            .instantiate_pre(&pre)
            .with_context(|| format!("instantiating {origin}"))?;
        let manifest = instance
            .manifest()
            .with_context(|| format!("reading the manifest of {origin}"))?;
        if manifest.topic.is_empty()
            || manifest.topic.len() > 64
            || !manifest
                .topic
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            anyhow::bail!(
                "{origin} declares topic {:?}; a topic is 1-64 ASCII letters, digits or '_'",
                manifest.topic
            );
        }
        Ok(FilterComponent {
            manifest,
            origin: origin.to_string(),
            pre,
        })
    }

    /// A fresh instance with its own store.
    pub fn instantiate(&self, component: &FilterComponent) -> anyhow::Result<FilterInstance> {
        self.instantiate_pre(&component.pre)
            .with_context(|| format!("instantiating {}", component.origin))
    }

    fn instantiate_pre(&self, pre: &FilterPre<FilterState>) -> anyhow::Result<FilterInstance> {
        let state = FilterState {
            wasi: WasiCtxBuilder::new().build(),
            table: ResourceTable::new(),
            limits: StoreLimitsBuilder::new()
                .memory_size(self.memory_limit)
                .instances(4)
                .build(),
        };
        let mut store = Store::new(self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(self.deadline_ticks);
        let bindings = pre.instantiate(&mut store)?;
        Ok(FilterInstance {
            store,
            bindings,
            deadline_ticks: self.deadline_ticks,
        })
    }
}

/// Compiles `bytes`, reusing an earlier compilation of the same bytes in
/// this process (servers started by tests share the built-ins).
fn compiled(engine: &Engine, bytes: &[u8]) -> anyhow::Result<Component> {
    use std::collections::HashMap;
    use std::hash::{DefaultHasher, Hash, Hasher};
    use std::sync::Mutex;
    static CACHE: OnceLock<Mutex<HashMap<(u64, usize), Component>>> = OnceLock::new();
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    let key = (hasher.finish(), bytes.len());
    let cache = CACHE.get_or_init(Default::default);
    if let Some(component) = cache
        .lock()
        .map_err(|_| anyhow!("component cache poisoned"))?
        .get(&key)
    {
        return Ok(component.clone());
    }
    let component = Component::new(engine, bytes)?;
    cache
        .lock()
        .map_err(|_| anyhow!("component cache poisoned"))?
        .insert(key, component.clone());
    Ok(component)
}

/// One instance: a store and the component's exports. Owned by one actor;
/// any error it returns means the instance must be rebuilt.
pub struct FilterInstance {
    store: Store<FilterState>,
    bindings: Filter,
    deadline_ticks: u64,
}

impl FilterInstance {
    /// Restarts the deadline: each call gets the full timeout.
    fn arm(&mut self) {
        self.store.set_epoch_deadline(self.deadline_ticks);
    }

    pub fn manifest(&mut self) -> anyhow::Result<FilterManifest> {
        self.arm();
        let m = self.bindings.call_manifest(&mut self.store)?;
        Ok(FilterManifest {
            topic: m.topic,
            source: match m.source {
                wit::Source::PendingTransactions => Source::PendingTransactions,
                wit::Source::MinedTransactions => Source::MinedTransactions,
                wit::Source::Heads => Source::Heads,
                wit::Source::Logs => Source::Logs,
            },
            payload: payload(m.payload),
        })
    }

    /// `Ok(Err(message))` is the guest refusing the parameters.
    pub fn subscribe(&mut self, id: u64, params: &str) -> anyhow::Result<Result<Payload, String>> {
        self.arm();
        Ok(self
            .bindings
            .call_subscribe(&mut self.store, id, params)?
            .map(payload))
    }

    pub fn unsubscribe(&mut self, id: u64) -> anyhow::Result<()> {
        self.arm();
        Ok(self.bindings.call_unsubscribe(&mut self.store, id)?)
    }

    /// Matches a packed batch; a guest-reported error is an error too (the
    /// guest cannot read what the host wrote).
    pub fn match_batch(&mut self, batch: &[u8]) -> anyhow::Result<Matches> {
        self.arm();
        let matches = self
            .bindings
            .call_match_batch(&mut self.store, batch)?
            .map_err(|e| anyhow!("the filter refused the batch: {e}"))?;
        if matches.events.len() != matches.subscriptions.len() {
            anyhow::bail!(
                "the filter returned {} event indexes but {} subscriptions",
                matches.events.len(),
                matches.subscriptions.len()
            );
        }
        Ok(Matches {
            events: matches.events,
            subscriptions: matches.subscriptions,
        })
    }
}

/// wasmtime has its own error type; anyhow's `context` needs a std error.
fn anyhow_result<T>(result: wasmtime::Result<T>) -> anyhow::Result<T> {
    result.map_err(anyhow::Error::from)
}

fn payload(p: wit::Payload) -> Payload {
    match p {
        wit::Payload::Hash => Payload::Hash,
        wit::Payload::Full => Payload::Full,
        wit::Payload::FullBlockvision => Payload::FullBlockvision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Callers racing for the engine share one epoch ticker: a second one
    /// would advance the epoch twice as fast and halve every deadline.
    #[test]
    fn racing_callers_start_one_ticker() {
        let callers: Vec<_> = (0..8)
            .map(|_| thread::spawn(|| shared_engine().map(|_| ()).map_err(|e| e.to_string())))
            .collect();
        for caller in callers {
            caller.join().expect("no panic").expect("the engine starts");
        }
        let tickers = std::fs::read_dir("/proc/self/task")
            .expect("Linux task list")
            .filter_map(Result::ok)
            .filter(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|name| name.trim() == "filter-epoch")
            })
            .count();
        assert_eq!(tickers, 1);
    }
}
