//! Where a subscription's replay must read history (docs/src/api.md,
//! History from the nodes): the chain's sources handed to the history's
//! planning ([`chainsieve_history::plan`]), its refusals as JSON-RPC
//! errors.

use std::sync::Arc;

use super::RpcError;
use chainsieve_chain::Chain;
use chainsieve_eventlog::cursor::ResumeFrom;
use chainsieve_history::HistoryFeed;
use chainsieve_history::limits::Streams;
use chainsieve_history::plan::{self, Sources};
use chainsieve_keys::plan::Plan;

/// A history stream for a `fromBlock` older than (or at the edge of)
/// `chain`'s log window, or a cursor whose block has left it, counted
/// among `streams` under `key`'s `plan`; `None` when the log serves it.
/// Pending topics have no history.
pub(super) async fn feed(
    chain: &Chain,
    streams: &Streams,
    key: &Arc<str>,
    plan: &Plan,
    asked: Option<&ResumeFrom>,
    source: chainsieve_filter_core::Source,
) -> Result<Option<HistoryFeed>, RpcError> {
    let Some(asked) = asked else {
        return Ok(None);
    };
    if !source.in_blocks() {
        return Ok(None);
    }
    let sources = Sources {
        chain: &chain.name,
        log: chain.log(),
        stream: chain.stream(),
        blocks: chain.history_blocks(),
        max_blocks: chain.history.max_blocks,
    };
    plan::plan(sources, asked, || streams.admit(key, plan))
        .await
        .map_err(|refused| RpcError::new(refused.code(), refused.to_string()))
}
