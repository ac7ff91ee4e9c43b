//! `eth_subscribe` and `eth_unsubscribe`. A subscription is registered
//! before the filter actor can deliver to it, and its response is queued
//! ahead of its first notification: by the actor itself (single calls), or
//! behind a gate opened once the batch response is queued. A
//! trailing options object ([`resume`](super::resume)) makes it replay the
//! log first.

use serde_json::Value;
use serde_json::value::RawValue;

use super::context::{Connection, Context, Gates, Outcome};
use super::params::{positional, require_positional};
use super::{Call, RpcError, history, response, result, resume};
use chainsieve_chain::Chain;
use chainsieve_fanout as fanout;
use chainsieve_filters::actor::{Start, Subscribe};
use chainsieve_filters::{FilterHandle, SubscribeError};
use chainsieve_keys::plan::{Limit, Plan};

pub(super) async fn subscribe(
    ctx: Context<'_>,
    plan: &Plan,
    connection: &Connection,
    call: &Call,
    batch: Option<&Gates>,
) -> Outcome {
    let request = || -> Result<_, RpcError> {
        require_positional(&call.params, "eth_subscribe")?;
        let (topic, mut params) = topic_and_params(&call.params)?;
        let filter = topic_filter(ctx.chain, &topic)?;
        let options = resume::take_options(&mut params, filter.source)?;
        Ok((filter, params, options))
    };
    let (filter, params, options) = match request() {
        Ok(parts) => parts,
        Err(error) => return Outcome::Reply(Err(error)),
    };
    let limit = plan.max_subscriptions_per_connection;
    if connection.owned().len() >= limit {
        return Outcome::Reply(Err(RpcError::limit_exceeded(format!(
            "subscription limit reached: this connection has {limit} subscriptions, the most its key's plan \"{}\" allows ({}); unsubscribe one first",
            plan.name,
            plan.origin(Limit::SubscriptionsPerConnection)
        ))));
    }
    let id = fanout::new_id();
    let key = ctx.subscriptions.next_key();
    // Register before the actor can deliver, so a close racing with this
    // call still finds and cancels it.
    connection.owned().insert(id.clone());
    ctx.subscriptions.insert(
        id.clone(),
        key,
        ctx.key.id.clone(),
        filter.clone(),
        &connection.owned,
    );
    // Counted against the connection's limit before anything is awaited.
    let history = history::feed(
        ctx.chain,
        ctx.history,
        &ctx.key.id,
        plan,
        options.from.as_ref(),
        filter.source,
    );
    let history = match history.await {
        Ok(history) => history.map(|feed| feed.metered(ctx.key.meter.clone())),
        Err(error) => {
            connection.owned().remove(&id);
            ctx.subscriptions.remove(&id, &ctx.key.id).await;
            return Outcome::Reply(Err(error));
        }
    };
    let start = match (&call.id, batch) {
        (None, _) => Start::Now,
        (Some(_), Some(gates)) => Start::Gated(gates.add()),
        // The response the client reads the id from, queued by the actor.
        (Some(_), None) => response(&call.id, &result(&id)).map_or(Start::Now, Start::Acknowledge),
    };
    let acked = matches!(start, Start::Acknowledge(_));
    let request = Subscribe {
        key,
        id: id.clone(),
        params: Value::Array(params).to_string(),
        sink: connection.sink.clone(),
        start,
        resume: options.from,
        finality: options.finality,
        history,
    };
    match filter.subscribe(request).await {
        Ok(()) if acked => Outcome::Sent,
        Ok(()) => Outcome::Reply(result(&id)),
        Err(error) => {
            connection.owned().remove(&id);
            ctx.subscriptions.remove(&id, &ctx.key.id).await;
            Outcome::Reply(Err(refused(error)))
        }
    }
}

/// `eth_subscribe`'s params (an array) as the topic and the rest.
pub(super) fn topic_and_params(params: &Value) -> Result<(String, Vec<Value>), RpcError> {
    let topic = match positional(params, 0) {
        Some(Value::String(topic)) => topic.clone(),
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "the first parameter must be the subscription type (a string), got {other}"
            )));
        }
        None => return Err(RpcError::invalid_params("missing the subscription type")),
    };
    let rest = params
        .as_array()
        .map(|items| items[1..].to_vec())
        .unwrap_or_default();
    Ok((topic, rest))
}

/// The filter serving `topic` on `chain`, or -32602 naming those served.
pub(super) fn topic_filter(chain: &Chain, topic: &str) -> Result<FilterHandle, RpcError> {
    chain.filter(topic).ok_or_else(|| {
        let filters = chain.filters();
        let available: Vec<&str> = filters.keys().map(String::as_str).collect();
        RpcError::invalid_params(format!(
            "unknown subscription type \"{topic}\" (available: {})",
            available.join(", ")
        ))
    })
}

/// The JSON-RPC error for a subscription the filter actor refused.
pub(super) fn refused(error: SubscribeError) -> RpcError {
    match error {
        SubscribeError::Params(message) => RpcError::invalid_params(message),
        SubscribeError::Limit(message) => RpcError::limit_exceeded(message),
        SubscribeError::Unavailable(message) => RpcError::internal(message),
        SubscribeError::Resume(refused) => resume::refusal(refused),
    }
}

pub(super) async fn unsubscribe(
    ctx: Context<'_>,
    params: &Value,
) -> Result<Box<RawValue>, RpcError> {
    require_positional(params, "eth_unsubscribe")?;
    let Some(Value::String(id)) = positional(params, 0) else {
        return Err(RpcError::invalid_params(
            "eth_unsubscribe takes the subscription id (a string)",
        ));
    };
    // Over a WebSocket only the connection's own subscriptions; over HTTP
    // any subscription of the same API key.
    let allowed = match ctx.connection {
        Some(connection) => connection.owned().remove(id.as_str()),
        None => true,
    };
    if allowed && ctx.subscriptions.remove(id, &ctx.key.id).await {
        result(&true)
    } else {
        Err(RpcError::generic("subscription not found"))
    }
}
