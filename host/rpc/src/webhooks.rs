//! The webhook methods (docs/src/api.md, Webhooks), over both transports:
//! `webhook_create`, `webhook_list`, `webhook_get`, `webhook_pause`,
//! `webhook_resume`, `webhook_delete`. Each API key sees only its own
//! webhooks; another key's id is "not found".
//!
//! And [`Opener`]: a webhook's subscription opened as `eth_subscribe`
//! opens a socket's (the same topic lookup, options, params checks, log
//! replay and history), handed to the webhook service by the wiring.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::context::Context;
use super::params::{positional, require_positional};
use super::subscribe::{Asked, HalfMade, Subscriber, open};
use super::subscriptions::Subscriptions;
use super::{Call, RpcError, result, resume};
use chainsieve_chain::Chain;
use chainsieve_fanout::Sink;
use chainsieve_filters::actor::Start;
use chainsieve_history::limits::Streams;
use chainsieve_keys::Keys;
use chainsieve_keys::plan::{Limit, Plan};
use chainsieve_usage::Meter;
use chainsieve_watchlists::Watchlists;
use chainsieve_webhook::{
    Batching, Create, Definition, FeedRefused, Feeds, Most, Opened, WebhookError,
};

/// Answers a `webhook_*` call.
pub(super) async fn call(
    ctx: Context<'_>,
    plan: &Plan,
    call: &Call,
) -> Result<Box<RawValue>, RpcError> {
    let Some(webhooks) = ctx.webhooks else {
        return Err(RpcError::method_not_found_msg(
            "webhooks are served by a server of role all or edge",
        ));
    };
    let owner = ctx.key.owner.to_string();
    let params = &call.params;
    match call.method.as_str() {
        "webhook_create" => {
            let request = create_request(ctx.chain, params)?;
            let hooks = webhooks.clone();
            let most = Most {
                webhooks: plan.max_webhooks,
                plan: plan.name.clone(),
                origin: plan.origin(Limit::Webhooks),
            };
            result(&to_the_end(async move { hooks.create(&owner, request, most).await }).await?)
        }
        "webhook_list" => {
            if params.as_array().is_some_and(|items| !items.is_empty()) || params.is_object() {
                return Err(RpcError::invalid_params("webhook_list takes no parameters"));
            }
            result(&webhooks.list(&owner))
        }
        "webhook_get" => {
            let id = id_param(params, "webhook_get", 1)?;
            result(&webhooks.get(&owner, id).map_err(error)?)
        }
        "webhook_pause" => {
            let id = id_param(params, "webhook_pause", 1)?.to_string();
            let hooks = webhooks.clone();
            result(&to_the_end(async move { hooks.pause(&owner, &id).await }).await?)
        }
        "webhook_resume" => {
            let id = id_param(params, "webhook_resume", 2)?;
            let subscribe = match positional(params, 1) {
                None => None,
                Some(start) => {
                    let view = webhooks.get(&owner, id).map_err(error)?;
                    Some(restart(&view["subscribe"], start)?)
                }
            };
            let (id, hooks) = (id.to_string(), webhooks.clone());
            result(&to_the_end(async move { hooks.resume(&owner, &id, subscribe).await }).await?)
        }
        "webhook_delete" => {
            let id = id_param(params, "webhook_delete", 1)?.to_string();
            let hooks = webhooks.clone();
            to_the_end(async move { hooks.delete(&owner, &id).await }).await?;
            result(&true)
        }
        other => Err(RpcError::method_not_found(other)),
    }
}

/// Runs a call that changes webhooks to its end even if its caller goes
/// (a WebSocket closed midway): a change is never left half made.
async fn to_the_end<T: Send + 'static>(
    work: impl Future<Output = Result<T, WebhookError>> + Send + 'static,
) -> Result<T, RpcError> {
    tokio::spawn(work)
        .await
        .map_err(|failed| RpcError::internal(format!("the webhook call failed: {failed}")))?
        .map_err(error)
}

/// The JSON-RPC error of a refused webhook call.
fn error(error: WebhookError) -> RpcError {
    match error {
        WebhookError::NotFound => {
            RpcError::not_found("webhook not found: this API key has no webhook of that id")
        }
        WebhookError::Invalid(message) => RpcError::invalid_params(message),
        WebhookError::Limit(message) => RpcError::limit_exceeded(message),
        WebhookError::Refused(FeedRefused { code, message }) => RpcError::new(code, message),
        store @ WebhookError::Store(_) => RpcError::internal(store.to_string()),
        WebhookError::Busy(message) => RpcError::unavailable(message),
    }
}

/// The webhook id, the first of at most `most` positional parameters.
fn id_param<'a>(params: &'a Value, method: &str, most: usize) -> Result<&'a str, RpcError> {
    require_positional(params, method)?;
    if params.as_array().is_some_and(|items| items.len() > most) {
        return Err(RpcError::invalid_params(format!(
            "{method} takes at most {most} parameters"
        )));
    }
    match positional(params, 0) {
        Some(Value::String(id)) => Ok(id),
        Some(other) => Err(RpcError::invalid_params(format!(
            "{method}'s first parameter is the webhook id (a string), got {other}"
        ))),
        None => Err(RpcError::invalid_params(format!(
            "{method} takes the webhook id"
        ))),
    }
}

/// What `webhook_create` asks: `[{"url", "subscribe", "batch"?}]` (or the
/// object alone, by name).
fn create_request(chain: &Chain, params: &Value) -> Result<Create, RpcError> {
    let object = match params {
        Value::Object(object) => object,
        Value::Array(items) => match items.as_slice() {
            [Value::Object(object)] => object,
            _ => {
                return Err(RpcError::invalid_params(
                    "webhook_create takes one object: {\"url\": \"https://…\", \"subscribe\": [\"logs\", {…}], \"batch\": {\"maxEvents\": 100, \"maxWaitMs\": 0}}",
                ));
            }
        },
        _ => return Err(RpcError::invalid_params("webhook_create takes one object")),
    };
    if let Some(unknown) = object
        .keys()
        .find(|key| !["url", "subscribe", "batch"].contains(&key.as_str()))
    {
        return Err(RpcError::invalid_params(format!(
            "webhook_create does not take \"{unknown}\" (it takes url, subscribe and batch)"
        )));
    }
    let url = match object.get("url") {
        Some(Value::String(url)) => url.clone(),
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "url must be a string, got {other}"
            )));
        }
        None => return Err(RpcError::invalid_params("webhook_create needs a url")),
    };
    let subscribe = match object.get("subscribe") {
        Some(Value::Array(subscribe)) => subscribe.clone(),
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "subscribe must be eth_subscribe's params (an array: [\"logs\", {{…}}]), got {other}"
            )));
        }
        None => {
            return Err(RpcError::invalid_params(
                "webhook_create needs subscribe: eth_subscribe's params, such as [\"newHeads\"]",
            ));
        }
    };
    let batch = match object.get("batch") {
        None => Batching::default(),
        Some(Value::Object(batch)) => batching(batch)?,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "batch must be an object ({{\"maxEvents\": 100, \"maxWaitMs\": 0}}), got {other}"
            )));
        }
    };
    Ok(Create {
        chain: chain.name.clone(),
        url,
        subscribe,
        batch,
    })
}

fn batching(batch: &Map<String, Value>) -> Result<Batching, RpcError> {
    let mut batching = Batching::default();
    for (key, value) in batch {
        let number = value.as_u64().ok_or_else(|| {
            RpcError::invalid_params(format!("batch.{key} must be a whole number, got {value}"))
        })?;
        match key.as_str() {
            "maxEvents" => batching.max_events = usize::try_from(number).unwrap_or(usize::MAX),
            "maxWaitMs" => batching.max_wait_ms = number,
            other => {
                return Err(RpcError::invalid_params(format!(
                    "batch does not take \"{other}\" (it takes maxEvents and maxWaitMs)"
                )));
            }
        }
    }
    Ok(batching)
}

/// A webhook's `subscribe` to start from `start` (an options object of
/// `resumeFrom` or `fromBlock`): its own options object replaced, its
/// finality kept unless `start` names one.
fn restart(subscribe: &Value, start: &Value) -> Result<Vec<Value>, RpcError> {
    let Value::Object(start) = start else {
        return Err(RpcError::invalid_params(format!(
            "webhook_resume's second parameter is where to start: {{\"resumeFrom\": \"<cursor>\"}} or {{\"fromBlock\": \"0x…\"}}, got {start}"
        )));
    };
    if !resume::is_options(start) {
        return Err(RpcError::invalid_params(
            "webhook_resume starts from {\"resumeFrom\": \"<cursor>\"} or {\"fromBlock\": \"0x…\"}",
        ));
    }
    let mut subscribe = subscribe.as_array().cloned().unwrap_or_default();
    let mut options = start.clone();
    if let Some(Value::Object(own)) = subscribe.last()
        && resume::is_options(own)
    {
        if let Some(finality) = own.get("finality") {
            options
                .entry("finality")
                .or_insert_with(|| finality.clone());
        }
        subscribe.pop();
    }
    subscribe.push(Value::Object(options));
    Ok(subscribe)
}

/// Opens webhooks' subscriptions, `eth_subscribe`'s way.
#[derive(Debug)]
pub struct Opener {
    pub chains: BTreeMap<String, Arc<Chain>>,
    /// History streams: a webhook's count against its owner's places.
    pub history_streams: Arc<Streams>,
    /// Whose plan a webhook's history stream counts under.
    pub keys: Arc<Keys>,
    /// Where subscription keys come from (unique in the process).
    pub subscriptions: Arc<Subscriptions>,
    /// The watchlists a webhook's parameters may name (its owner's).
    pub watchlists: Option<Arc<Watchlists>>,
}

impl Opener {
    async fn subscribe(
        &self,
        definition: &Definition,
        cursor: Option<&str>,
        sink: Sink,
    ) -> Result<Opened, RpcError> {
        let chain = self.chains.get(&definition.chain).ok_or_else(|| {
            RpcError::invalid_params(format!("chain {} is not served here", definition.chain))
        })?;
        let lists = (self.watchlists.as_deref(), definition.owner.as_str());
        let mut asked = Asked::read(chain, &Value::Array(definition.subscribe.clone()), lists)?;
        if let Some(cursor) = cursor {
            asked.resume_after(cursor)?;
        }
        let (owner, plan, meter) = self.keys.plan_of(&definition.owner);
        let who = Subscriber {
            key: &owner,
            plan: &plan,
            meter,
        };
        let key = self.subscriptions.next_key();
        let filter = asked.filter().clone();
        let made = HalfMade::new(&filter, key);
        let id = definition.id.as_str().into();
        open(
            chain,
            &self.history_streams,
            who,
            asked,
            (key, id),
            sink,
            || Start::Now,
        )
        .await?;
        made.keep();
        // From here on the webhook holds it: dropping its handle ends it.
        let opened = Opened::new(Box::pin(async move { filter.unsubscribe(key).await }));
        Ok(opened)
    }
}

impl Feeds for Opener {
    fn open<'a>(
        &'a self,
        definition: &'a Definition,
        cursor: Option<&'a str>,
        sink: Sink,
    ) -> BoxFuture<'a, Result<Opened, FeedRefused>> {
        Box::pin(async move {
            self.subscribe(definition, cursor, sink)
                .await
                .map_err(|error| FeedRefused {
                    code: error.code,
                    message: error.message,
                })
        })
    }

    fn meter_of(&self, owner: &str) -> Option<Arc<Meter>> {
        self.keys.meter_of(owner)
    }

    fn owner_refusal(&self, owner: &str) -> Option<String> {
        self.keys.ended_reason(owner)
    }
}

/// Whether `method` is one of the webhook methods.
pub(super) fn is_webhook_method(method: &str) -> bool {
    method.starts_with("webhook_")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_restart_replaces_the_options_and_keeps_finality() {
        let subscribe =
            json!(["logs", {"address": "0x01"}, {"fromBlock": "0x1", "finality": "safe"}]);
        let restarted = restart(&subscribe, &json!({"resumeFrom": "eth:9:0:00"})).expect("restart");
        assert_eq!(
            Value::Array(restarted),
            json!(["logs", {"address": "0x01"}, {"resumeFrom": "eth:9:0:00", "finality": "safe"}])
        );
        let bare = restart(&json!(["newHeads"]), &json!({"fromBlock": "0x5"})).expect("restart");
        assert_eq!(
            Value::Array(bare),
            json!(["newHeads", {"fromBlock": "0x5"}])
        );
        for bad in [json!("0x5"), json!({}), json!({"address": "0x01"})] {
            let error = restart(&subscribe, &bad).expect_err("refused");
            assert_eq!(error.code, -32602, "{bad}");
        }
    }

    #[test]
    fn batching_names_what_it_does_not_take() {
        let mut batch = Map::new();
        batch.insert("maxEvents".into(), json!(5));
        batch.insert("maxWaitMs".into(), json!(250));
        assert_eq!(
            batching(&batch).expect("read"),
            Batching {
                max_events: 5,
                max_wait_ms: 250
            }
        );
        batch.insert("size".into(), json!(1));
        let error = batching(&batch).expect_err("size");
        assert!(error.message.contains("\"size\""), "{}", error.message);
        let mut negative = Map::new();
        negative.insert("maxEvents".into(), json!(-1));
        assert!(batching(&negative).is_err());
    }
}
