//! Where a subscription's replay must read the nodes (docs/src/api.md,
//! History from the nodes): a `fromBlock` older than the chain's log
//! window, or a cursor whose block has left it and is still canonical.

use std::sync::Arc;

use super::RpcError;
use chainsieve_chain::Chain;
use chainsieve_eventlog::cursor::{Cursor, ResumeFrom};
use chainsieve_history::limits::Streams;
use chainsieve_history::{self as history, Blocks, HistoryFeed, Source, StartAt};
use chainsieve_keys::plan::Plan;

/// A history stream for a `fromBlock` older than (or at the edge of)
/// `chain`'s log window, or a cursor whose block has left it, read from
/// an edge's stream on the bus as far as it reaches, the chain's nodes, or
/// a devnet chain's archive (docs/src/api.md, History from the nodes);
/// `None` when the log serves it, or when the chain holds nothing beyond
/// it (the log's refusal then stands). A cursor resumes only if its block is
/// still canonical. Pending topics have no history.
pub(super) async fn feed(
    chain: &Chain,
    streams: &Streams,
    key: &Arc<str>,
    plan: &Plan,
    asked: Option<&ResumeFrom>,
    source: chainsieve_filter_core::Source,
) -> Result<Option<HistoryFeed>, RpcError> {
    let admit = || streams.admit(key, plan).map_err(RpcError::limit_exceeded);
    let nodes = chain.history_blocks();
    let Some(asked) = asked.filter(|_| nodes.is_some() || chain.stream().is_some()) else {
        return Ok(None);
    };
    if source == chainsieve_filter_core::Source::PendingTransactions {
        return Ok(None);
    }
    let log = chain.log();
    let Some((oldest, tip)) = log.canonical_bounds() else {
        return Err(RpcError::unavailable(format!(
            "{} has not received its first block yet: resume in a moment",
            chain.name
        )));
    };
    // A block this close to the window's edge may leave it before the
    // actor reads the log: the stream hands over to the log at once if
    // it is still there.
    let edge = oldest.saturating_add(history::CHUNK);
    let from = match asked {
        ResumeFrom::Block(number) if *number < edge && *number <= tip => StartAt::Block(*number),
        ResumeFrom::After(cursor)
            if cursor.chain == chain.name
                && cursor
                    .position
                    .is_none_or(|position| position < log.oldest()) =>
        {
            match cursor.block {
                Some(block) if block < oldest => StartAt::After {
                    block,
                    index: cursor.index,
                    tag: cursor.tag,
                },
                _ => return Ok(None),
            }
        }
        _ => return Ok(None),
    };
    let start = match from {
        StartAt::Block(block) | StartAt::After { block, .. } => block,
    };
    let max = chain.history.max_blocks;
    if tip.saturating_sub(start) > max {
        return Err(RpcError::not_found(format!(
            "block {start} is {} blocks behind {}'s tip (block {tip}); this server reads at most {max} blocks back from the nodes ([history] max_blocks)",
            tip - start,
            chain.name
        )));
    }
    // An edge reads its chain's stream on the bus as far as it reaches,
    // then the nodes.
    if let Some(stream) = chain.stream() {
        let reach = history::stream::reach(stream).await.map_err(|error| {
            RpcError::unavailable(format!(
                "{}'s stream on the bus could not be read: {error:#}",
                chain.name
            ))
        })?;
        match (reach, &nodes) {
            (Some(reach), _) if start >= reach => {
                let admitted = admit()?;
                return Ok(Some(history::start_on_bus(
                    stream.clone(),
                    log.clone(),
                    from,
                    admitted,
                )));
            }
            (reach, None) => {
                let reach = reach.map_or_else(|| "no block".to_string(), |b| format!("block {b}"));
                return Err(RpcError::not_found(format!(
                    "{}'s stream on the bus reaches back to {reach} (bus.max_age_secs), not block {start}, and this edge has no node to read older blocks from",
                    chain.name
                )));
            }
            (_, Some(_)) => {}
        }
    }
    let Some(blocks) = nodes else {
        return Ok(None);
    };
    if let Some(held) = blocks.oldest().await.map_err(RpcError::unavailable)?
        && start < held
    {
        return Err(RpcError::not_found(format!(
            "{}'s devnet holds its history from block {held} on, not block {start} (it keeps [devnet] archive_memory_mib in memory; with data_dir, every block up to [history] max_blocks back)",
            chain.name
        )));
    }
    if let (ResumeFrom::After(cursor), StartAt::After { block, .. }) = (asked, from) {
        still_canonical(&blocks, cursor, block).await?;
    }
    let admitted = admit()?;
    let source = Source {
        blocks,
        log: log.clone(),
    };
    Ok(Some(history::start(source, from, admitted)))
}

/// Whether the block `cursor` names (number `block`) is still the one
/// canonical there.
async fn still_canonical(blocks: &Blocks, cursor: &Cursor, block: u64) -> Result<(), RpcError> {
    let hash = blocks.hash_of(block).await.map_err(|error| {
        RpcError::unavailable(format!(
            "the nodes could not say whether block {block} of the cursor {cursor} is still canonical: {error}"
        ))
    })?;
    match hash {
        Some(hash) if chainsieve_eventlog::hash_tag(&hash) == cursor.tag => Ok(()),
        Some(_) => Err(RpcError::not_found(format!(
            "the cursor {cursor} names a block that is no longer canonical: block {block} was reorganised out; subscribe again from a block"
        ))),
        None => Err(RpcError::unavailable(format!(
            "the nodes do not hold block {block} of the cursor {cursor}, so cannot say whether it is still canonical"
        ))),
    }
}
