//! The method table, for both transports: the subscription methods
//! ([`super::subscribe`]) and the head cursor a resuming client starts
//! from, `token_price` ([`super::token_price`]), what real
//! clients send around them (`eth_chainId`, `net_version`, and the window's
//! blocks in [`super::blocks`]), `eth_sendRawTransaction` on devnet chains
//! ([`super::submit`]) with what wallets call around it ([`super::devnet`]);
//! on node chains, every other method the `[rpc]` policy allows goes to the
//! node ([`super::forward`]).

use std::sync::Arc;

use alloy_primitives::U64;
use futures_util::future::join_all;

pub use super::context::{Connection, Context, Reply};
use super::context::{Gates, Outcome};
use super::{
    Call, Incoming, RpcError, batch_response, blocks, devnet, error_response, forward, logs, parse,
    refused, response, result, submit, subscribe, token_price, watchlists, webhooks,
};
use chainsieve_chain::Chain;
use chainsieve_history::Blocks;
use chainsieve_history::archive::Archive;
use chainsieve_model::Block;

/// What `web3_clientVersion` answers.
pub const CLIENT_VERSION: &str = concat!("chainsieve/v", env!("CARGO_PKG_VERSION"));

/// Answers a body or frame.
pub async fn process(ctx: Context<'_>, bytes: &[u8]) -> Reply {
    let gates = Gates::default();
    let response = match parse(bytes, ctx.limits.max_batch) {
        Err(error) => Some(error_response(&error)),
        Ok(Incoming::Single(Err(failed))) => response(&failed.id, &Err(failed.error)),
        Ok(Incoming::Single(Ok(call))) => match handle(ctx, &call, None).await {
            Outcome::Reply(outcome) => response(&call.id, &outcome),
            Outcome::Sent => None,
        },
        Ok(Incoming::Batch(items)) => {
            // Answered together (calls forwarded to the node wait side by
            // side, not one after another), in the batch's order.
            let gates = &gates;
            let parts = join_all(items.into_iter().map(|item| async move {
                match item {
                    Err(failed) => response(&failed.id, &Err(failed.error)),
                    Ok(call) => match handle(ctx, &call, Some(gates)).await {
                        Outcome::Reply(outcome) => response(&call.id, &outcome),
                        Outcome::Sent => None,
                    },
                }
            }))
            .await;
            batch_response(parts.into_iter().flatten().collect())
        }
    };
    Reply::new(response, gates)
}

/// The reply to a request refused before it was read.
pub fn refuse(error: RpcError) -> Reply {
    Reply::new(Some(error_response(&error)), Gates::default())
}

/// One call; `batch` holds the gates of the batch it is part of.
async fn handle(ctx: Context<'_>, call: &Call, batch: Option<&Gates>) -> Outcome {
    let reply = |outcome| Outcome::Reply(outcome);
    // The key's grant now: a session's key may have been re-planned or
    // revoked since it connected.
    let (grant, plan) = match ctx.key.admit(&ctx.chain.name) {
        Ok(admitted) => admitted,
        Err(refusal) => return reply(Err(refused(&refusal))),
    };
    if let Err(limited) = ctx.rate.check(&ctx.key.id, &plan) {
        return reply(Err(limited));
    }
    if let Some(refusal) = grant.method_refusal(&plan, &call.method) {
        return reply(Err(RpcError::not_supported(refusal)));
    }
    if let Some(meter) = &ctx.key.meter {
        meter.called(&call.method);
    }
    match call.method.as_str() {
        "eth_subscribe" => match ctx.connection {
            None => reply(Err(RpcError::method_not_found_msg(
                "notifications not supported",
            ))),
            Some(connection) => subscribe::subscribe(ctx, &plan, connection, call, batch).await,
        },
        "eth_unsubscribe" => reply(subscribe::unsubscribe(ctx, &call.params).await),
        // What a resuming client subscribes from (docs/src/api.md, The
        // head cursor).
        "chainsieve_headCursor" => reply(result(
            &ctx.chain
                .log()
                .head_cursor()
                .map(|cursor| cursor.to_string()),
        )),
        "eth_chainId" => reply(result(&U64::from(ctx.chain.chain_id))),
        "net_version" => reply(result(&ctx.chain.chain_id.to_string())),
        "net_listening" => reply(result(&true)),
        "eth_syncing" => reply(result(&false)),
        "web3_clientVersion" => reply(result(&CLIENT_VERSION)),
        "eth_blockNumber" => reply(held(ctx, call, blocks::block_number(ctx.chain)).await),
        "eth_getBlockByNumber" => {
            reply(held(ctx, call, blocks::block_by_number(ctx.chain, &call.params)).await)
        }
        "eth_getBlockByHash" => {
            reply(held(ctx, call, blocks::block_by_hash(ctx.chain, &call.params)).await)
        }
        "eth_getTransactionByHash" => {
            reply(mined_transaction(ctx, call, blocks::transaction_answer).await)
        }
        "eth_getTransactionReceipt" => {
            reply(held(ctx, call, blocks::receipt(ctx.chain, &call.params)).await)
        }
        "eth_getLogs" => reply(held(ctx, call, logs::get_logs(ctx.chain, &call.params)).await),
        "token_price" => reply(token_price::token_price(ctx.chain, &call.params).await),
        method if webhooks::is_webhook_method(method) => {
            reply(webhooks::call(ctx, &plan, call).await)
        }
        method if watchlists::is_watchlist_method(method) => {
            reply(watchlists::call(ctx, &plan, call).await)
        }
        "eth_sendRawTransaction" => match ctx.chain.submissions() {
            Some(submissions) => {
                reply(submit::send_raw_transaction(ctx.chain, submissions, &call.params).await)
            }
            None => reply(forward::forward(ctx.chain, call).await),
        },
        "evm_mine" => match ctx.chain.requests() {
            Some(requests) => reply(devnet::mine(ctx.chain, requests, &call.params).await),
            None => reply(forward::forward(ctx.chain, call).await),
        },
        "anvil_dropTransaction" => match ctx.chain.requests() {
            Some(requests) => {
                reply(devnet::drop_transaction(ctx.chain, requests, &call.params).await)
            }
            None => reply(forward::forward(ctx.chain, call).await),
        },
        _ => match ctx.chain.ledger() {
            Some(ledger) => reply(devnet::answer(ctx.chain, ledger, call)),
            None => reply(forward::forward(ctx.chain, call).await),
        },
    }
}

/// Block `number` as a devnet chain's archive holds it; `None` if it does
/// not.
async fn archived(
    archive: &Archive,
    number: u64,
    full: bool,
) -> Option<Result<Box<serde_json::value::RawValue>, RpcError>> {
    match archive.block(number).await {
        Ok(block) => block.and_then(|block| block.block_json(full)).map(Ok),
        Err(error) => Some(Err(archive_error(format_args!("block {number}"))(error))),
    }
}

/// `call` of a mined transaction's hash, answered by `answer` from its
/// block: the window's, else (see [`held`]) the node's or the archive's.
async fn mined_transaction(
    ctx: Context<'_>,
    call: &Call,
    answer: blocks::MinedAnswer,
) -> Result<Box<serde_json::value::RawValue>, RpcError> {
    let mined = blocks::mined_transaction(ctx.chain, &call.params, &call.method, answer);
    held(ctx, call, mined).await
}

/// The window's answer; else, on a node chain, the node's; a devnet
/// chain's older blocks, its archive's.
async fn held(
    ctx: Context<'_>,
    call: &Call,
    held: Result<blocks::Held, RpcError>,
) -> Result<Box<serde_json::value::RawValue>, RpcError> {
    let held = held?;
    if ctx.chain.node().is_some() && !matches!(held, blocks::Held::Answer(_)) {
        return forward::forward(ctx.chain, call).await;
    }
    let Some(Blocks::Archive(archive)) = ctx.chain.history_blocks() else {
        return held.fallback();
    };
    match held {
        blocks::Held::Older {
            number,
            full,
            fallback,
        } => archived(&archive, number, full).await.unwrap_or(fallback),
        blocks::Held::OlderByHash { hash, full } => {
            let block = archive
                .block_by_hash(hash)
                .await
                .map_err(archive_error(format_args!("block {hash}")))?
                .filter(|block| below_window(ctx.chain, block));
            blocks::block_or_null(block.as_deref(), full)
        }
        blocks::Held::OlderTransaction { hash, answer } => {
            let found = archive
                .transaction(hash)
                .await
                .map_err(archive_error(format_args!("transaction {hash}")))?
                .filter(|(block, _)| below_window(ctx.chain, block));
            match found {
                Some((block, index)) => answer(&block, index),
                None => result(&serde_json::Value::Null),
            }
        }
        blocks::Held::OlderLogs {
            filter,
            blocks,
            fallback,
        } => match archived_blocks(ctx.chain, &archive, blocks).await? {
            Some(blocks) => logs::matching(&blocks, &filter),
            None => fallback,
        },
        held @ (blocks::Held::Answer(_) | blocks::Held::Elsewhere(_)) => held.fallback(),
    }
}

/// Whether `block`, found by hash in the archive, is older than the
/// window: within the window's numbers the window's answer stands (the
/// archive follows the log a moment behind, so a block a reorg just
/// orphaned may still be in it).
fn below_window(chain: &Chain, block: &Block) -> bool {
    let oldest = chain.canonical().oldest().map(|oldest| oldest.number());
    oldest.is_some_and(|oldest| block.number() < oldest)
}

/// The error of a failed read of `what` from a devnet chain's archive.
fn archive_error(what: std::fmt::Arguments<'_>) -> impl FnOnce(anyhow::Error) -> RpcError + '_ {
    move |error| {
        RpcError::internal(format!(
            "reading {what} from the devnet's archive: {error:#}"
        ))
    }
}

/// The canonical blocks `reach` names, from a devnet chain's archive (and
/// the log, for what the archive has not taken yet); `None` if the
/// archive no longer holds the first.
async fn archived_blocks(
    chain: &Chain,
    archive: &Archive,
    reach: blocks::LogReach,
) -> Result<Option<Vec<Arc<Block>>>, RpcError> {
    let reading = |error: anyhow::Error| {
        RpcError::internal(format!("reading the devnet's archive: {error:#}"))
    };
    let (from, to) = match reach {
        blocks::LogReach::Numbers(from, to) => (from, to),
        blocks::LogReach::Hash(hash) => {
            let block = archive.block_by_hash(hash).await.map_err(reading)?;
            // An unknown hash matches no log.
            return Ok(Some(block.into_iter().collect()));
        }
    };
    let mut blocks = archive.range(from, to).await.map_err(reading)?;
    if blocks.first().map(|block| block.number()) != Some(from) {
        return Ok(None);
    }
    let last = blocks.last().map_or(from, |block| block.number());
    if last < to {
        blocks.extend(chain.log().canonical_range(last + 1, to));
    }
    Ok(Some(blocks))
}
