//! `eth_subscribe` and `eth_unsubscribe`, and the one way a subscription
//! is opened, for a socket and for a webhook alike ([`open`], undone by
//! [`HalfMade`] when it fails midway). A subscription is registered
//! before the filter actor can deliver to it, and its response is queued
//! ahead of its first notification: by the actor itself (single calls), or
//! behind a gate opened once the batch response is queued. A
//! trailing options object ([`resume`](super::resume)) makes it replay the
//! log first.

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::context::{Connection, Context, Gates, Outcome};
use super::params::{positional, require_positional};
use super::subscriptions::Subscriptions;
use super::{Call, RpcError, history, response, result, resume};
use chainsieve_chain::Chain;
use chainsieve_fanout::{self as fanout, Sink};
use chainsieve_filters::actor::{Start, Subscribe};
use chainsieve_filters::{FilterHandle, SubscribeError};
use chainsieve_history::limits::Streams;
use chainsieve_keys::plan::{Limit, Plan};
use chainsieve_usage::Meter;
use chainsieve_watchlists::Watchlists;
use chainsieve_watchlists::views::View;

pub(super) async fn subscribe(
    ctx: Context<'_>,
    plan: &Plan,
    connection: &Connection,
    call: &Call,
    batch: Option<&Gates>,
) -> Outcome {
    let asked = require_positional(&call.params, "eth_subscribe").and_then(|()| {
        let owner = ctx.key.owner.to_string();
        Asked::read(
            ctx.chain,
            &call.params,
            (ctx.watchlists.map(|w| &**w), &owner),
        )
    });
    let asked = match asked {
        Ok(asked) => asked,
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
    // Counted against the connection's limit before anything is awaited.
    let made = HalfMade::new(asked.filter(), key).register(
        ctx.subscriptions,
        connection,
        id.clone(),
        ctx.key.id.clone(),
    );
    let mut acked = false;
    let start = || match (&call.id, batch) {
        (None, _) => Start::Now,
        (Some(_), Some(gates)) => Start::Gated(gates.add()),
        // The response the client reads the id from, queued by the actor.
        (Some(_), None) => response(&call.id, &result(&id)).map_or(Start::Now, |response| {
            acked = true;
            Start::Acknowledge(response)
        }),
    };
    let who = Subscriber {
        key: &ctx.key.id,
        plan,
        meter: ctx.key.meter.clone(),
    };
    let opened = open(
        ctx.chain,
        ctx.history_streams,
        who,
        asked,
        (key, id.clone()),
        connection.sink.clone(),
        start,
    );
    match opened.await {
        Ok(()) => {
            made.keep();
            if acked {
                Outcome::Sent
            } else {
                Outcome::Reply(result(&id))
            }
        }
        Err(error) => Outcome::Reply(Err(error)),
    }
}

/// A subscription as asked (`eth_subscribe`'s params, or a webhook's
/// `subscribe`): read once, the same way for both.
pub(super) struct Asked {
    filter: FilterHandle,
    /// The topic's parameters, its options object taken off.
    params: Vec<Value>,
    options: resume::Options,
    /// The watchlists as of now, when the parameters name one: what a
    /// replay matches as of until live batches bring newer views.
    view: Option<Arc<View>>,
}

impl Asked {
    /// `params` (an array: the topic, its parameters, an options object)
    /// on `chain`, for the key `owner` (its secret's digest), whose
    /// watchlists its parameters may name.
    pub(super) fn read(
        chain: &Chain,
        params: &Value,
        watchlists: Watchlisted<'_>,
    ) -> Result<Self, RpcError> {
        let (topic, mut params) = topic_and_params(params)?;
        let filter = topic_filter(chain, &topic)?;
        let options = resume::take_options(&mut params, filter.source)?;
        let mut named = false;
        for param in &mut params {
            named |= resolve_watchlists(param, &watchlists, &filter)?;
        }
        let view = match watchlists.0 {
            Some(lists) if named => Some(Arc::new(lists.view(lists.index().seq()))),
            _ => None,
        };
        Ok(Self {
            filter,
            params,
            options,
            view,
        })
    }

    /// The filter serving its topic.
    pub(super) fn filter(&self) -> &FilterHandle {
        &self.filter
    }

    /// Starts after `cursor` instead of where it asked (a webhook going on
    /// from its last delivery).
    pub(super) fn resume_after(&mut self, cursor: &str) -> Result<(), RpcError> {
        let mut from = vec![json!({"resumeFrom": cursor})];
        self.options.from = resume::take_options(&mut from, self.filter.source)?.from;
        Ok(())
    }
}

/// Who a subscription counts under: its key's places among the history
/// streams, its plan, and its usage.
pub(super) struct Subscriber<'a> {
    pub key: &'a Arc<str>,
    pub plan: &'a Plan,
    pub meter: Option<Arc<Meter>>,
}

/// A subscription being made, undone when dropped before [`HalfMade::keep`]:
/// whichever step fails, and if the call making it is dropped midway (its
/// socket closed), its actor is told to end it and a socket's
/// subscription leaves the connection's ids and the live table again.
pub(super) struct HalfMade<'a> {
    filter: FilterHandle,
    key: u64,
    /// A socket's: where it was registered before its actor could deliver.
    registered: Option<(&'a Subscriptions, &'a Connection, Arc<str>)>,
    kept: bool,
}

impl<'a> HalfMade<'a> {
    /// A subscription of `filter` as `key`, registered nowhere yet.
    pub(super) fn new(filter: &FilterHandle, key: u64) -> Self {
        Self {
            filter: filter.clone(),
            key,
            registered: None,
            kept: false,
        }
    }

    /// Registers it as `id` of `connection`'s, for `api_key`, before its
    /// actor can deliver, so a close racing with the call still finds and
    /// cancels it.
    pub(super) fn register(
        mut self,
        subscriptions: &'a Subscriptions,
        connection: &'a Connection,
        id: Arc<str>,
        api_key: Arc<str>,
    ) -> Self {
        connection.owned().insert(id.clone());
        subscriptions.insert(
            id.clone(),
            self.key,
            api_key,
            self.filter.clone(),
            &connection.owned,
        );
        self.registered = Some((subscriptions, connection, id));
        self
    }

    /// Made: nothing to undo.
    pub(super) fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for HalfMade<'_> {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        if let Some((subscriptions, connection, id)) = &self.registered {
            connection.owned().remove(id);
            subscriptions.forget(id);
        }
        // The actor may have it already; ending one it lacks is nothing.
        self.filter.end(self.key);
    }
}

/// Opens `asked` on its actor as `id` (the component's `key`), delivering
/// to `sink` from `start` (made once the rest was accepted): a history
/// stream admitted first where it starts before the log, counted under
/// `who`. On an error the caller drops its
/// [`HalfMade`], which undoes the rest.
pub(super) async fn open(
    chain: &Chain,
    streams: &Streams,
    who: Subscriber<'_>,
    asked: Asked,
    (key, id): (u64, Arc<str>),
    sink: Sink,
    start: impl FnOnce() -> Start,
) -> Result<(), RpcError> {
    let Asked {
        filter,
        params,
        options,
        view,
    } = asked;
    let history = history::feed(
        chain,
        streams,
        who.key,
        who.plan,
        options.from.as_ref(),
        filter.source,
    )
    .await?
    .map(|feed| feed.metered(who.meter));
    let request = Subscribe {
        key,
        id,
        params: Value::Array(params).to_string(),
        sink,
        start: start(),
        resume: options.from,
        finality: options.finality,
        history,
        view,
    };
    filter.subscribe(request).await.map_err(refused)
}

/// The watchlists a subscription's parameters may name, and whose (the
/// digest of the key's secret); `None` where the role keeps none.
pub(super) type Watchlisted<'a> = (Option<&'a Watchlists>, &'a str);

/// Replaces every `{"watchlist": "<name>"}` in `value` by the number the
/// component knows it by, `{"watchlist": <number>}` (docs/src/watchlists.md,
/// Naming a watchlist in a filter): the name checked against the caller's
/// key, the topic's component checked to take watchlists (contract 0.3).
/// Answers whether it named one.
fn resolve_watchlists(
    value: &mut Value,
    (lists, owner): &Watchlisted<'_>,
    filter: &FilterHandle,
) -> Result<bool, RpcError> {
    let mut named = false;
    match value {
        Value::Array(items) => {
            for item in items {
                named |= resolve_watchlists(item, &(*lists, owner), filter)?;
            }
            Ok(named)
        }
        Value::Object(map) if map.contains_key("watchlist") => {
            let name = match (map.len(), map.get("watchlist")) {
                (1, Some(Value::String(name))) => name.clone(),
                _ => {
                    return Err(RpcError::invalid_params(format!(
                        "a watchlist is named {{\"watchlist\": \"<name>\"}}, got {value}"
                    )));
                }
            };
            let version = filter.status().version;
            if !takes_watchlists(&version) {
                return Err(RpcError::invalid_params(format!(
                    "the {} filter (chainsieve:filter@{version}) takes no watchlists",
                    filter.topic
                )));
            }
            let Some(lists) = lists else {
                return Err(RpcError::invalid_params(
                    "watchlists are served by a server of role all",
                ));
            };
            let handle = lists.handle_of(owner, &name).map_err(|_| {
                RpcError::invalid_params(format!(
                    "unknown watchlist \"{name}\": this API key has no watchlist of that name"
                ))
            })?;
            *value = serde_json::json!({ "watchlist": handle });
            Ok(true)
        }
        Value::Object(map) => {
            for item in map.values_mut() {
                named |= resolve_watchlists(item, &(*lists, owner), filter)?;
            }
            Ok(named)
        }
        _ => Ok(false),
    }
}

/// Whether a component of contract `version` takes watchlists (0.3 on).
fn takes_watchlists(version: &str) -> bool {
    let mut parts = version
        .split('.')
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (0, 3)
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
