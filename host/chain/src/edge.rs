//! Role `edge`: the chain's log, price journal and finality marks from
//! the bus, into the pipeline, the price store and the log; clients
//! served. An edge reads no node for
//! events (forwarded calls still go to the chain's node).

use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::parts::{Origin, Parts, SOURCE_QUEUE};
use chainsieve_bus::{Bus, ChainLog, follow};
use chainsieve_model::SourceEvent;
use chainsieve_price::journal::PriceJournal;
use chainsieve_price::store::PriceStore;

/// Follows the chain's log and price journal on `bus` into the pipeline
/// and the price store; the chain's log on the bus is given back too, for
/// history older than the edge's own log.
pub(super) async fn start(parts: &Parts<'_>, bus: &Bus) -> anyhow::Result<(Origin, ChainLog)> {
    let on_bus = bus.log(&parts.spec.name).await?;
    let stream = on_bus.clone();
    let prices = PriceJournal::open(bus, &parts.spec.name).await?;
    let finality = bus.finality().await?;
    let (events, source) = parts
        .metrics
        .queues
        .channel(&parts.spec.name, "source", SOURCE_QUEUE);
    let (chain, log, shutdown) = (
        parts.spec.name.clone(),
        parts.state.log().clone(),
        parts.shutdown.clone(),
    );
    // The edge's chain is what these three carry from the bus: without
    // one of them it is not served (another edge is, from the bus).
    parts
        .tasks
        .critical(parts.task("finality follower"), parts.part(), async move {
            finality.follow(&chain, log, shutdown).await
        });
    parts.tasks.critical(
        parts.task("bus follower"),
        parts.part(),
        follow_bus(
            on_bus,
            prices,
            parts.price.store().clone(),
            parts.spec.log_blocks,
            events,
            parts.shutdown.clone(),
        ),
    );
    parts.tasks.critical(
        parts.task("pipeline"),
        parts.part(),
        parts
            .pipeline(None, None)
            .run(source, parts.shutdown.clone()),
    );
    let origin = match parts.pool() {
        Some(pool) => Origin::Node { status: None, pool },
        None => Origin::Bus,
    };
    Ok((origin, stream))
}

/// An edge's chain from the bus: its price journal applied to `store`,
/// then (ready once `token_price` answers what the journal held at the
/// start) its log followed into the pipeline behind `events` while the
/// journal is followed on, until `shutdown`. A store that cannot take the
/// journal is this task's error: the edge stops, naming it.
async fn follow_bus(
    on_bus: ChainLog,
    prices: PriceJournal,
    store: Arc<PriceStore>,
    blocks: usize,
    events: mpsc::Sender<SourceEvent>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let refused = "the price database cannot take the bus's price journal";
    if prices
        .catch_up(&store, &shutdown)
        .await
        .context(refused)?
        .is_none()
    {
        return Ok(());
    }
    // Either ending ends the chain's feed: the supervisor hears of it.
    tokio::select! {
        followed = prices.follow(store, shutdown.clone()) => followed.context(refused),
        () = follow::follow(on_bus.clone(), blocks, events, shutdown.clone()) => Ok(()),
    }
}
