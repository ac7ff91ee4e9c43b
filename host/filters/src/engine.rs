//! The process's one wasmtime [`Engine`], compiling and instantiating filter
//! components with per-call deadlines (epoch interruption), a memory cap
//! per instance, and instances drawn from a pre-reserved pool.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, SystemTime};

use alloy_primitives::B256;
use anyhow::{Context, anyhow};
use chainsieve_filter_core::projection::tx_fields;
use chainsieve_filter_core::{Matches, Memberships, Reach, Source, params};
use chainsieve_watchlists::views::View;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::compiled::KeptCompilations;
use super::contract::{self, Delivery, FilterManifest, Layout};
use super::limits::InstanceLimits;
use super::reach::ReachIndex;
use super::{v0_1_0, v0_2_0, v0_3_0};
use chainsieve_config::FiltersConfig;

/// How often the epoch advances; a call's deadline is a whole number of ticks.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The contract versions this host serves, each by a bindings module of its
/// own (`super::v0_1_0`, `super::v0_2_0`). A component names its version
/// through the `chainsieve:filter/types@<version>` interface it imports.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.1.0", "0.2.0", "0.3.0"];

/// Sizes of the instance pool, for the whole process. A server runs one
/// instance per (chain, topic), plus one briefly during a swap or a
/// rebuild; a filters-directory component of ~200 KB uses 2-4 core
/// instances and 1-2 memories. Slots are virtual memory until used, so the
/// pool is generous: 1,000 component instances serve hundreds of
/// (chain, topic) actors with room for swaps, and several servers embedded
/// in one process (`chainsieve::spawn`) share it.
const POOL_COMPONENT_INSTANCES: u32 = 1_000;
const POOL_CORE_INSTANCES: u32 = 5_000;
const POOL_MEMORIES: u32 = 2_000;
const POOL_TABLES: u32 = 5_000;

/// An engine and the components compiled for it (a component belongs to
/// the engine that compiled it).
struct SharedEngine {
    engine: Engine,
    /// By keccak-256 of the bytes: servers started by tests share the
    /// built-ins; a rewritten filter file is compiled once. Held only to
    /// look up or insert.
    compiled: Mutex<HashMap<B256, Component>>,
    /// Whether calls have a deadline (epoch interruption).
    metered: bool,
}

/// The process-wide engine: one engine lets every server in the process
/// (tests start many) share compiled components. Engine and ticker are
/// made inside one `get_or_init`, so racing callers cannot start two
/// tickers (which would halve every deadline). `metered: false` is the
/// same engine without epoch interruption, only to measure what the
/// deadline costs.
fn shared_engine(metered: bool) -> anyhow::Result<&'static SharedEngine> {
    static METERED: OnceLock<Result<SharedEngine, String>> = OnceLock::new();
    static UNMETERED: OnceLock<Result<SharedEngine, String>> = OnceLock::new();
    let slot = if metered { &METERED } else { &UNMETERED };
    slot.get_or_init(|| {
        start_engine(metered)
            .map(|engine| SharedEngine {
                engine,
                compiled: Mutex::default(),
                metered,
            })
            .map_err(|e| format!("{e:#}"))
    })
    .as_ref()
    .map_err(|e| anyhow!("{e}"))
}

/// The engine, and with `metered` the thread that advances its epoch
/// until it is gone.
fn start_engine(metered: bool) -> anyhow::Result<Engine> {
    let mut config = Config::new();
    config.epoch_interruption(metered);
    // Measured (docs/src/architecture.md, Why this shape (measured)): component-model
    // async support adds ~650 ns to every call, and filters never need it.
    config.concurrency_support(false);
    // Instances come from a pool reserved once: instantiating is a few
    // microseconds and a rebuild after a trap never maps fresh memory. Each
    // memory slot keeps the default 4 GiB reservation, so wasm32 accesses
    // need no bounds checks; the per-instance cap is the store's limiter.
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(POOL_COMPONENT_INSTANCES)
        .total_core_instances(POOL_CORE_INSTANCES)
        .total_memories(POOL_MEMORIES)
        .total_tables(POOL_TABLES)
        .max_memory_size(1 << 32);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = anyhow_result(Engine::new(&config)).context("configuring the wasmtime engine")?;
    if !metered {
        return Ok(engine);
    }
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

/// Per-instance state: WASI (guests built for wasm32-wasip2 import it
/// through std) and the limits.
pub struct FilterState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: InstanceLimits,
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
    shared: &'static SharedEngine,
    linker: Linker<FilterState>,
    deadline_ticks: u64,
    /// For messages: the deadline as configured.
    call_timeout: Duration,
    memory_limit: usize,
    /// `filters.max_values`, passed to every instance in its environment.
    max_values: String,
    /// `filters.max_payload_bytes`: the longest payload a 0.2 component
    /// may write.
    max_payload_bytes: usize,
    /// Where compilations outlive the process (the data directory's
    /// `compiled/`); `None`: each process compiles its components.
    kept: Option<KeptCompilations>,
}

/// A linked component of one contract version, ready to instantiate.
#[derive(Clone)]
enum Pre {
    V0_1(v0_1_0::FilterPre<FilterState>),
    V0_2(v0_2_0::FilterPre<FilterState>),
    V0_3(v0_3_0::FilterPre<FilterState>),
}

/// An instance's exports, of its contract version.
enum Bindings {
    V0_1(v0_1_0::Filter),
    V0_2(v0_2_0::Filter),
    V0_3(v0_3_0::Filter),
}

/// A compiled, linked component and its manifest, ready to instantiate.
#[derive(Clone)]
pub struct FilterComponent {
    pub manifest: FilterManifest,
    /// Where it came from: `built-in <file>` or the file's path.
    pub origin: String,
    /// keccak-256 of the file, `0x`-hex: tells two versions of a file apart.
    pub hash: String,
    /// The `chainsieve:filter` contract version it targets.
    pub version: String,
    pub loaded_at: SystemTime,
    pre: Pre,
}

impl std::fmt::Debug for FilterComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterComponent")
            .field("manifest", &self.manifest)
            .field("origin", &self.origin)
            .field("hash", &self.hash)
            .field("version", &self.version)
            .finish()
    }
}

impl FilterEngine {
    pub fn new(config: &FiltersConfig) -> anyhow::Result<Arc<Self>> {
        Self::on(shared_engine(true)?, config, None)
    }

    /// The engine of [`FilterEngine::new`], keeping what it compiles in
    /// `dir` for the next start (a server's `<data_dir>/compiled`).
    pub fn keeping_compiled(config: &FiltersConfig, dir: &Path) -> anyhow::Result<Arc<Self>> {
        let shared = shared_engine(true)?;
        let kept = KeptCompilations::open(&shared.engine, dir)?;
        Self::on(shared, config, Some(kept))
    }

    /// The same engine without call deadlines: a looping component hangs
    /// its caller. Only to measure what epoch interruption costs.
    pub fn without_deadline(config: &FiltersConfig) -> anyhow::Result<Arc<Self>> {
        Self::on(shared_engine(false)?, config, None)
    }

    fn on(
        shared: &'static SharedEngine,
        config: &FiltersConfig,
        kept: Option<KeptCompilations>,
    ) -> anyhow::Result<Arc<Self>> {
        let mut linker = Linker::new(&shared.engine);
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
            shared,
            linker,
            deadline_ticks,
            call_timeout: config.call_timeout(),
            memory_limit,
            max_values: config.max_values.to_string(),
            max_payload_bytes: usize::try_from(config.max_payload_bytes).unwrap_or(usize::MAX),
            kept,
        }))
    }

    /// Compiles `bytes` (named `origin` in messages), checks it targets a
    /// supported contract version and implements the filter world, and
    /// reads its manifest.
    pub fn load(&self, origin: &str, bytes: &[u8]) -> anyhow::Result<FilterComponent> {
        let hash = alloy_primitives::keccak256(bytes);
        let component = compiled(self.shared, self.kept.as_ref(), hash, bytes)
            .with_context(|| format!("compiling {origin}"))?;
        let version = contract_version(&self.shared.engine, &component)
            .with_context(|| format!("checking the contract version of {origin}"))?;
        let pre = anyhow_result(self.linker.instantiate_pre(&component)).with_context(|| {
            format!("linking {origin} (it may import something the host does not provide)")
        })?;
        let world = || format!("{origin} does not export the chainsieve:filter@{version} world");
        let pre = match version.as_str() {
            "0.1.0" => Pre::V0_1(anyhow_result(v0_1_0::FilterPre::new(pre)).with_context(world)?),
            "0.2.0" => Pre::V0_2(anyhow_result(v0_2_0::FilterPre::new(pre)).with_context(world)?),
            "0.3.0" => Pre::V0_3(anyhow_result(v0_3_0::FilterPre::new(pre)).with_context(world)?),
            other => {
                anyhow::bail!("{origin}: this host has no bindings for chainsieve:filter@{other}")
            }
        };
        let mut instance = self
            .instantiate_pre(&pre, ReachIndex::default())
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
        if let Delivery::Kind(kind) = manifest.delivery
            && !kind.fits(manifest.source)
        {
            anyhow::bail!(
                "{origin} delivers {kind:?} payloads of {:?}, which have none",
                manifest.source
            );
        }
        if manifest.source == Source::Lifecycle
            && let Layout::Projected(fields) = manifest.layout
            && fields & tx_fields::INPUT != 0
        {
            anyhow::bail!(
                "{origin} reads `input` of lifecycle turns, which carry no call data (`selector` they carry)"
            );
        }
        Ok(FilterComponent {
            manifest,
            origin: origin.to_string(),
            hash: hash.to_string(),
            version,
            loaded_at: SystemTime::now(),
            pre,
        })
    }

    /// A fresh instance with its own store.
    pub fn instantiate(&self, component: &FilterComponent) -> anyhow::Result<FilterInstance> {
        let manifest = &component.manifest;
        let reach = ReachIndex::new(manifest.source, manifest.layout);
        self.instantiate_pre(&component.pre, reach)
            .with_context(|| format!("instantiating {}", component.origin))
    }

    /// An instance whose subscriptions' reach `reach` keeps (the one that
    /// reads a manifest has none).
    fn instantiate_pre(&self, pre: &Pre, reach: ReachIndex) -> anyhow::Result<FilterInstance> {
        let state = FilterState {
            wasi: WasiCtxBuilder::new()
                .env(params::MAX_FILTER_VALUES_ENV, &self.max_values)
                .build(),
            table: ResourceTable::new(),
            limits: InstanceLimits::new(self.memory_limit),
        };
        let mut store = Store::new(&self.shared.engine, state);
        store.limiter(|s| &mut s.limits);
        if self.shared.metered {
            // Instantiating runs the component's start code: it gets a
            // deadline too.
            store.set_epoch_deadline(self.deadline_ticks);
        }
        let bindings = match pre {
            Pre::V0_1(pre) => Bindings::V0_1(pre.instantiate(&mut store)?),
            Pre::V0_2(pre) => Bindings::V0_2(pre.instantiate(&mut store)?),
            Pre::V0_3(pre) => Bindings::V0_3(pre.instantiate(&mut store)?),
        };
        Ok(FilterInstance {
            exports: Exports {
                store,
                bindings,
                deadline_ticks: self.shared.metered.then_some(self.deadline_ticks),
                call_timeout: self.call_timeout,
            },
            max_payload_bytes: self.max_payload_bytes,
            writes_for: HashSet::new(),
            reach,
        })
    }
}

/// Which `chainsieve:filter` version `component` targets, refusing one
/// this host does not serve with a message naming both.
fn contract_version(engine: &Engine, component: &Component) -> anyhow::Result<String> {
    let imports: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let Some(version) = imports.iter().find_map(|name| {
        name.strip_prefix("chainsieve:filter/")
            .map(|rest| rest.split_once('@').map_or("", |(_, v)| v))
    }) else {
        anyhow::bail!(
            "it does not use the chainsieve:filter contract (it imports {}); build it with chainsieve-filter-sdk",
            if imports.is_empty() {
                "nothing".to_string()
            } else {
                imports.join(", ")
            }
        );
    };
    if !SUPPORTED_VERSIONS.contains(&version) {
        anyhow::bail!(
            "it targets chainsieve:filter@{version}, and this host serves chainsieve:filter@{}",
            SUPPORTED_VERSIONS.join(", @")
        );
    }
    Ok(version.to_string())
}

/// Compiles `bytes` (whose keccak-256 is `hash`), reusing an earlier
/// compilation of the same bytes on this engine: this process's, or one
/// `kept` on disk.
fn compiled(
    shared: &SharedEngine,
    kept: Option<&KeptCompilations>,
    hash: B256,
    bytes: &[u8],
) -> anyhow::Result<Component> {
    let cached = || {
        shared
            .compiled
            .lock()
            .map_err(|_| anyhow!("component cache poisoned"))
    };
    if let Some(component) = cached()?.get(&hash) {
        return Ok(component.clone());
    }
    let component = match kept {
        Some(kept) => kept.component(hash, bytes)?,
        None => anyhow_result(Component::new(&shared.engine, bytes))?,
    };
    cached()?.insert(hash, component.clone());
    Ok(component)
}

/// One instance: a store and the component's exports. Owned by one actor;
/// any error it returns means the instance must be rebuilt.
pub struct FilterInstance {
    exports: Exports,
    max_payload_bytes: usize,
    /// The subscriptions that answered [`Delivery::Written`]: each of
    /// their matches must name a payload ([`contract::check_written`]).
    writes_for: HashSet<u64>,
    /// Which events each subscription can match: the component is asked
    /// about those alone.
    reach: ReachIndex,
}

/// An instance's store and its exports in it.
struct Exports {
    store: Store<FilterState>,
    bindings: Bindings,
    /// `None` on the engine without deadlines.
    deadline_ticks: Option<u64>,
    call_timeout: Duration,
}

impl Exports {
    /// Runs one export with the full deadline; a failure says which limit
    /// stopped it, if one did.
    fn call<T>(
        &mut self,
        export: impl FnOnce(&Bindings, &mut Store<FilterState>) -> wasmtime::Result<T>,
    ) -> anyhow::Result<T> {
        if let Some(ticks) = self.deadline_ticks {
            self.store.set_epoch_deadline(ticks);
        }
        let outcome = export(&self.bindings, &mut self.store);
        let refusal = self.store.data_mut().limits.take_refusal();
        outcome.map_err(|error| {
            let error = anyhow::Error::from(error);
            if let Some(refusal) = refusal {
                error.context(refusal)
            } else if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                error.context(format!(
                    "the call ran past its deadline of {} ms",
                    self.call_timeout.as_millis()
                ))
            } else {
                error
            }
        })
    }

    /// The component's answer about `batch`, checked: a guest-reported
    /// error is an error too (the guest cannot read what the host wrote),
    /// and so is an answer that does not hold together or a written
    /// payload that fails its checks ([`contract::check_written`]).
    fn match_batch(
        &mut self,
        batch: &[u8],
        memberships: &Memberships,
        max_payload_bytes: usize,
        writes_for: &HashSet<u64>,
    ) -> anyhow::Result<Matches> {
        let matches = self
            .call(|bindings, store| {
                Ok(match bindings {
                    Bindings::V0_1(f) => f.call_match_batch(store, batch)?.map(v0_1_0::matches),
                    Bindings::V0_2(f) => f.call_match_batch(store, batch)?.map(v0_2_0::matches),
                    Bindings::V0_3(f) => f
                        .call_match_batch(store, batch, &v0_3_0::memberships(memberships))?
                        .map(v0_3_0::matches),
                })
            })?
            .map_err(|e| anyhow!("the filter refused the batch: {e}"))?;
        if matches.events.len() != matches.subscriptions.len() {
            anyhow::bail!(
                "the filter returned {} event indexes but {} subscriptions",
                matches.events.len(),
                matches.subscriptions.len()
            );
        }
        contract::check_written(&matches, max_payload_bytes, writes_for)?;
        Ok(matches)
    }
}

impl FilterInstance {
    pub fn manifest(&mut self) -> anyhow::Result<FilterManifest> {
        self.exports.call(|bindings, store| {
            Ok(match bindings {
                Bindings::V0_1(f) => v0_1_0::manifest(f.call_manifest(store)?),
                Bindings::V0_2(f) => v0_2_0::manifest(f.call_manifest(store)?),
                Bindings::V0_3(f) => v0_3_0::manifest(f.call_manifest(store)?),
            })
        })
    }

    /// `Ok(Err(message))` is the guest refusing the parameters; a reach
    /// the host cannot use is an error ([`ReachIndex::insert`]).
    pub fn subscribe(&mut self, id: u64, params: &str) -> anyhow::Result<Result<Delivery, String>> {
        let answer = self.exports.call(|bindings, store| {
            Ok(match bindings {
                Bindings::V0_1(f) => f
                    .call_subscribe(store, id, params)?
                    .map(|kind| Ok((v0_1_0::delivery(kind), Reach::Any))),
                Bindings::V0_2(f) => f
                    .call_subscribe(store, id, params)?
                    .map(v0_2_0::subscription),
                Bindings::V0_3(f) => f
                    .call_subscribe(store, id, params)?
                    .map(v0_3_0::subscription),
            })
        })?;
        // Refused, the guest keeps what `id` was (its rules read the
        // params before dropping anything): so does the host.
        let (delivery, reach) = match answer {
            Ok(accepted) => accepted?,
            Err(message) => return Ok(Err(message)),
        };
        self.writes_for.remove(&id);
        self.reach.insert(id, reach, delivery)?;
        if delivery == Delivery::Written {
            self.writes_for.insert(id);
        }
        Ok(Ok(delivery))
    }

    pub fn unsubscribe(&mut self, id: u64) -> anyhow::Result<()> {
        self.writes_for.remove(&id);
        self.reach.remove(id);
        self.exports.call(|bindings, store| match bindings {
            Bindings::V0_1(f) => f.call_unsubscribe(store, id),
            Bindings::V0_2(f) => f.call_unsubscribe(store, id),
            Bindings::V0_3(f) => f.call_unsubscribe(store, id),
        })
    }

    /// Matches a packed batch (in the layout the component reads): the
    /// component is asked about the events its subscriptions can match,
    /// and those that take every event are served by the host
    /// ([`ReachIndex::run`]), with the memberships `view` gives their
    /// watched fields; its answer is checked ([`Exports::match_batch`]).
    pub fn match_batch(&mut self, batch: &[u8], view: Option<&View>) -> anyhow::Result<Matches> {
        let Self {
            exports,
            max_payload_bytes,
            writes_for,
            reach,
        } = self;
        reach.run(batch, view, |part, memberships| {
            exports.match_batch(part, memberships, *max_payload_bytes, writes_for)
        })
    }
}

/// wasmtime has its own error type; anyhow's `context` needs a std error.
fn anyhow_result<T>(result: wasmtime::Result<T>) -> anyhow::Result<T> {
    result.map_err(anyhow::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Callers racing for the engine share one epoch ticker: a second one
    /// would advance the epoch twice as fast and halve every deadline.
    #[test]
    fn racing_callers_start_one_ticker() {
        let callers: Vec<_> = (0..8)
            .map(|_| thread::spawn(|| shared_engine(true).map(|_| ()).map_err(|e| e.to_string())))
            .collect();
        for caller in callers {
            caller.join().expect("no panic").expect("the engine starts");
        }
        let tickers = || {
            std::fs::read_dir("/proc/self/task")
                .expect("Linux task list")
                .filter_map(Result::ok)
                .filter(|task| {
                    std::fs::read_to_string(task.path().join("comm"))
                        .is_ok_and(|name| name.trim() == "filter-epoch")
                })
                .count()
        };
        // A new thread names itself once it runs: on a busy machine the
        // ticker may not have yet. Wait for it (bounded), then count.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while tickers() == 0 && std::time::Instant::now() < deadline {
            thread::yield_now();
        }
        assert_eq!(tickers(), 1);
    }
}
