//! Role `all`: one process reads the chain's devnet or node, keeps its
//! event log (on disk for a node chain with `data_dir`) and a devnet
//! chain's archive, indexes its prices from the pipeline, and serves
//! clients.

use std::path::Path;
use std::sync::Arc;

use alloy_primitives::B256;
use anyhow::Context;
use tokio::sync::{mpsc, watch};

use super::pipeline::{PERSIST_QUEUE, PipelineState};
use crate::parts::{Origin, Parts, SOURCE_QUEUE};
use chainsieve_config::{ChainSpec, LogConfig, SourceSpec};
use chainsieve_eventlog::EventLog;
use chainsieve_eventlog::store::{self, LogStore, Persist};
use chainsieve_history::{self as history, archive::Archive};
use chainsieve_ingest::devnet::{self, Devnet, DevnetCalls};
use chainsieve_ingest::upstream;
use chainsieve_model::SourceState;
use chainsieve_price::indexer::DRAIN;
use chainsieve_price::record::InStore;
use chainsieve_price::{Calls, PriceIndex};
use chainsieve_runtime::queues::Queues;
use chainsieve_runtime::tasks::{Part, Tasks};

/// Submitted transactions that may wait for the devnet; past that the
/// submitting requests wait.
const SUBMISSION_QUEUE: usize = 4_096;

/// `evm_mine` and `anvil_dropTransaction` requests that may wait for the
/// devnet; past that the requests wait.
const REQUEST_QUEUE: usize = 64;

/// Starts the chain's price indexing, source and pipeline (handing its
/// steps to `persist`, the log's writer, if any).
pub(super) fn start(
    parts: &Parts<'_>,
    mut persist: Option<mpsc::Sender<Persist>>,
) -> anyhow::Result<Origin> {
    // The one-process server indexes prices from its pipeline.
    let recorder = Arc::new(InStore(parts.price.store().clone()));
    let pool = parts.pool();
    let calls = match &pool {
        None => Calls::Own(Arc::new(DevnetCalls::new(parts.spec.chain_id))),
        Some(pool) => Calls::Node(pool.clone()),
    };
    let (indexing, price_feed) =
        parts
            .price
            .indexing(parts.spec, calls, recorder, parts.shutdown.clone(), DRAIN);
    // Without it the chain's prices stand still: the chain is not ready.
    parts
        .tasks
        .part(parts.task("price index"), parts.part(), indexing);
    let chain = parts.spec.name.as_str();
    let queues = &parts.metrics.queues;
    queues.watch(chain, "price feed", &price_feed);
    let (events, source) = queues.channel(chain, "source", SOURCE_QUEUE);
    let mut drops = None;
    let origin = match (&parts.spec.source, pool) {
        (SourceSpec::Nodes(nodes), Some(pool)) => {
            drops = Some(parts.drop_checks(&pool, events.clone(), parts.shutdown.clone()));
            let settings = parts.node_settings(nodes, Vec::new());
            let (status, watcher) = watch::channel(SourceState::Connecting);
            let (state, price, nodes, shutdown) = (
                parts.state.clone(),
                parts.price.clone(),
                pool.clone(),
                parts.shutdown.clone(),
            );
            // Started again after a panic or an early end, from what the
            // window holds then: the pipeline takes it up where it was.
            parts
                .tasks
                .restarting(parts.task("source"), parts.part(), move || {
                    let mut settings = settings.clone();
                    let resumed = resume_from(&state, &price);
                    let (nodes, events, status, shutdown) = (
                        nodes.clone(),
                        events.clone(),
                        status.clone(),
                        shutdown.clone(),
                    );
                    // Not live until this run says so.
                    status.send_replace(SourceState::Connecting);
                    async move {
                        settings.resume_from = resumed?;
                        upstream::run(settings, nodes, events, status, shutdown).await;
                        anyhow::Ok(())
                    }
                });
            Origin::Node {
                status: Some(watcher),
                pool,
            }
        }
        _ => {
            let archive = archive(parts)?;
            let (steps, kept) = queues.channel(chain, "archive", PERSIST_QUEUE);
            parts.tasks.critical(
                parts.task("archive"),
                parts.part(),
                history::archive::keep(archive.clone(), chain.into(), kept),
            );
            persist = Some(steps);
            let devnet = Devnet::new(parts.spec.chain_id, &parts.config.devnet);
            let ledger = devnet.ledger();
            let (submissions, submitted) = queues.channel(chain, "submissions", SUBMISSION_QUEUE);
            let (requests, asked) = queues.channel(chain, "devnet requests", REQUEST_QUEUE);
            parts.tasks.critical(
                parts.task("devnet"),
                parts.part(),
                devnet::run(devnet, events, submitted, asked, parts.shutdown.clone()),
            );
            Origin::Devnet {
                submissions,
                ledger,
                requests,
                archive,
            }
        }
    };
    let mut pipeline = parts.pipeline(Some(price_feed), persist);
    if let Some(lists) = parts.watchlists {
        pipeline = pipeline.watching(lists.clone());
    }
    if let Some(drops) = drops {
        pipeline = pipeline.checking_drops(drops);
    }
    parts.tasks.critical(
        parts.task("pipeline"),
        parts.part(),
        pipeline.run(source, parts.shutdown.clone()),
    );
    Ok(origin)
}

/// A devnet chain's archive: in memory, and in the data directory when
/// there is one.
fn archive(parts: &Parts<'_>) -> anyhow::Result<Arc<Archive>> {
    let path = parts
        .config
        .data_dir()
        .map(|dir| dir.join(format!("{}.devnet.redb", parts.spec.name)));
    let archive = Archive::new(
        parts
            .config
            .devnet
            .archive_memory_mib
            .saturating_mul(1 << 20),
        path.as_deref(),
        parts.config.history.max_blocks,
    )
    .with_context(|| format!("opening {}'s devnet archive", parts.spec.name))?;
    Ok(Arc::new(archive))
}

/// The chain's event log: for a node chain with a data directory (`dir`), restored
/// from its file, with a task (on `tasks`) persisting the steps the
/// pipeline sends; otherwise in memory only.
pub(super) fn event_log(
    spec: &ChainSpec,
    config: &LogConfig,
    dir: Option<&Path>,
    tasks: &Tasks,
    queues: &Queues,
) -> anyhow::Result<(Arc<EventLog>, Option<mpsc::Sender<Persist>>)> {
    let dir = match (&spec.source, dir) {
        (SourceSpec::Nodes(_), Some(dir)) => dir,
        _ => {
            let log = EventLog::new(&spec.name, spec.log_blocks, config.memory_mib);
            return Ok((Arc::new(log), None));
        }
    };
    let path = dir.join(format!("{}.log.redb", spec.name));
    let store = LogStore::open(&path).with_context(|| {
        format!(
            "opening the log database {} (a file admits one server at a time)",
            path.display()
        )
    })?;
    let stored = store
        .load()
        .with_context(|| format!("reading the log database {}", path.display()))?;
    let log = Arc::new(EventLog::restored(
        &spec.name,
        spec.log_blocks,
        config.memory_mib,
        stored,
    ));
    match log.canonical_bounds() {
        Some((oldest, tip)) => {
            tracing::info!(chain = %spec.name, oldest, tip, position = log.head(), file = %path.display(), "event log restored: blocks {oldest} to {tip}");
        }
        None => {
            tracing::info!(chain = %spec.name, file = %path.display(), "event log: nothing to restore, a new file")
        }
    }
    let (persist, steps) = queues.channel(&spec.name, "event log writes", PERSIST_QUEUE);
    // What the log's file misses is lost at the next start: the server
    // cannot go on without it.
    tasks.critical(
        format!("{} event log writer", spec.name),
        Part::Chain(spec.name.clone()),
        store::write(store, log.chain().clone(), steps),
    );
    Ok((log, Some(persist)))
}

/// Where a node source picks up after a restart: the canonical blocks a
/// restored log holds (so a reorg that happened meanwhile connects to
/// them and is undone), else the price index's last block.
fn resume_from(state: &PipelineState, price: &PriceIndex) -> anyhow::Result<Vec<(u64, B256)>> {
    let window: Vec<_> = state
        .window()
        .blocks()
        .map(|block| (block.number(), block.hash))
        .collect();
    if !window.is_empty() {
        return Ok(window);
    }
    Ok(price.resume_from()?.into_iter().collect())
}
