//! The connector's rules, without a socket: what goes to the server and
//! what to alloy for each message of either, each reconnection and each
//! retry that falls due. The connection's task (`socket.rs`) owns one and
//! does the I/O; the clock is passed in, so every rule is tested here.

use std::borrow::Cow;
use std::collections::HashMap;

/// The session's maps: looked up once or twice per notification, by keys
/// the application cannot choose (the server's ids), so a fast hash.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::Arc;
use std::time::Instant;

use alloy_json_rpc::{
    ErrorPayload, EthNotification, Id, PubSubItem, Response, ResponsePayload, SubId,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::cursors::{cursor_block, subscription_key};
use crate::{OnRefused, Options, ResumeRefusedError};

/// Options of an `eth_subscribe` call's last parameter.
const OPTIONS: [&str; 3] = ["resumeFrom", "fromBlock", "finality"];

/// Methods that may take effect twice if sent again after a drop.
const NOT_REPEATABLE: [&str; 2] = ["eth_sendRawTransaction", "eth_sendTransaction"];

/// The code of a refusal or an ending that a resume from the last cursor
/// cures, after a backoff (the nodes could not give a block, or a
/// restarted server has not read the cursor's block again yet).
const TRY_AGAIN: i64 = -32002;

/// What a session has for the socket, for alloy and for the application's
/// error handler after a step.
#[derive(Debug, Default)]
pub(crate) struct Output {
    pub to_server: Vec<String>,
    pub to_alloy: Vec<PubSubItem>,
    pub refusals: Vec<ResumeRefusedError>,
}

/// Where a subscription resumes from when it is made again.
#[derive(Clone, Debug, PartialEq)]
enum Resume {
    Cursor(String),
    FromBlock(String),
    Now,
}

/// One subscription of the application.
#[derive(Debug)]
struct Subscription {
    /// The topic and filter, without the options object.
    params: Vec<Value>,
    finality: Option<Value>,
    resume: Resume,
    key: String,
}

/// A request sent and not answered yet.
#[derive(Debug)]
enum InFlight {
    /// The application's, as sent: sent again on the next socket.
    Application { method: String, request: String },
    /// The application's `eth_subscribe`, as sent with the resume point
    /// it was given (`start`: its parameters, which its answer makes a
    /// subscription of): sent again on the next socket.
    Subscribe { start: Box<Start>, request: String },
    /// Ours, asking where a new subscription of the application starts
    /// (`start` is its subscribe, held until the answer).
    Start { start: Box<Start>, request: String },
    /// Ours, making the application's subscription `id` again.
    MadeAgain { id: SubId },
    /// Ours, ending a subscription on the server; its answer is nobody's.
    Unsubscribe,
}

/// An application's `eth_subscribe` waiting for its starting point.
#[derive(Debug)]
struct Start {
    id: Id,
    params: Vec<Value>,
    options: serde_json::Map<String, Value>,
}

/// A subscription to make again once a backoff has passed.
#[derive(Debug)]
struct Retry {
    at: Instant,
    generation: u64,
    id: SubId,
}

/// The connector's state for one alloy client: its subscriptions by the id
/// alloy holds (the server's first one), the server's current ids, what is
/// in flight.
pub(crate) struct Session {
    options: Arc<Options>,
    subscriptions: Map<SubId, Subscription>,
    /// The server's ids on the current socket, to alloy's.
    server_ids: Map<SubId, SubId>,
    in_flight: Map<Id, InFlight>,
    retries: Vec<Retry>,
    /// Our requests' ids: `chainsieve:<n>`, never one of alloy's numbers.
    next_id: u64,
    /// Bumped on each new socket: a retry set on an older one is dropped.
    generation: u64,
}

/// A message from the server, parsed once: a response or a notification.
#[derive(Deserialize)]
struct Inbound<'a> {
    #[serde(default)]
    id: Option<Id>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<ErrorPayload>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<NotificationParams<'a>>,
}

#[derive(Deserialize)]
struct NotificationParams<'a> {
    subscription: SubId,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cursor: Option<Cow<'a, str>>,
    #[serde(default)]
    error: Option<ErrorPayload>,
}

/// A request from alloy.
#[derive(Deserialize)]
struct Outbound<'a> {
    #[serde(default)]
    id: Option<Id>,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

impl Session {
    pub(crate) fn new(options: Arc<Options>) -> Self {
        Self {
            options,
            subscriptions: Map::default(),
            server_ids: Map::default(),
            in_flight: Map::default(),
            retries: Vec::new(),
            next_id: 0,
            generation: 0,
        }
    }

    /// Subscriptions made and neither refused nor unsubscribed.
    pub(crate) fn subscription_count(&self) -> usize {
        self.subscriptions.len()
    }

    /// A request of alloy's: an `eth_subscribe` gets its resume point
    /// (after asking the server for its head cursor when it has none), an
    /// `eth_unsubscribe` the server's current id; every one is kept until
    /// answered.
    pub(crate) fn on_request(&mut self, request: &str, out: &mut Output) {
        let Ok(parsed) = serde_json::from_str::<Outbound>(request) else {
            // Not ours to judge: the server answers it.
            out.to_server.push(request.to_string());
            return;
        };
        let Some(id) = parsed.id else {
            out.to_server.push(request.to_string());
            return;
        };
        let params: Vec<Value> = parsed
            .params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        match parsed.method.as_ref() {
            "eth_subscribe" if !params.is_empty() => self.subscribe(id, params, out),
            // alloy sends each with id 1, whatever else is in flight: ours
            // instead, its answer dropped.
            "eth_unsubscribe" => self.unsubscribe(params, out),
            method => {
                self.in_flight.insert(
                    id,
                    InFlight::Application {
                        method: method.to_string(),
                        request: request.to_string(),
                    },
                );
                out.to_server.push(request.to_string());
            }
        }
    }

    /// The application's `eth_subscribe`: from a stored cursor, the one it
    /// gave, or the log's head cursor (so that a drop before the first
    /// notification loses nothing either).
    fn subscribe(&mut self, id: Id, mut params: Vec<Value>, out: &mut Output) {
        let options = take_options(&mut params);
        let key = subscription_key(&params, options.get("finality"));
        let stored = self.options.store.as_ref().and_then(|s| s.load(&key));
        let start = Start {
            id,
            params,
            options,
        };
        if let Some(cursor) = stored {
            let mut start = start;
            start.options.remove("fromBlock");
            start
                .options
                .insert("resumeFrom".into(), Value::String(cursor));
            self.send_subscribe(start, out);
        } else if start.options.contains_key("resumeFrom")
            || start.options.contains_key("fromBlock")
        {
            self.send_subscribe(start, out);
        } else {
            // A finality subscription starts after the chain's last block
            // of that grade; any other at the log's head cursor
            // (docs/src/api.md, The head cursor).
            let (method, query) = match start.options.get("finality") {
                Some(Value::String(grade)) => ("eth_getBlockByNumber", json!([grade, false])),
                _ => ("chainsieve_headCursor", json!([])),
            };
            let (id, request) = self.request(method, query);
            out.to_server.push(request.clone());
            self.in_flight.insert(
                id,
                InFlight::Start {
                    start: Box::new(start),
                    request,
                },
            );
        }
    }

    /// Sends the application's subscribe with the resume point its options
    /// now hold, under its own id.
    fn send_subscribe(&mut self, start: Start, out: &mut Output) {
        let mut params = start.params.clone();
        if !start.options.is_empty() {
            params.push(Value::Object(start.options.clone()));
        }
        let request =
            json!({"jsonrpc": "2.0", "id": start.id, "method": "eth_subscribe", "params": params})
                .to_string();
        out.to_server.push(request.clone());
        self.in_flight.insert(
            start.id.clone(),
            InFlight::Subscribe {
                start: Box::new(start),
                request,
            },
        );
    }

    fn unsubscribe(&mut self, params: Vec<Value>, out: &mut Output) {
        let Some(held) = params
            .first()
            .and_then(|p| serde_json::from_value::<SubId>(p.clone()).ok())
        else {
            return;
        };
        self.subscriptions.remove(&held);
        self.retries.retain(|r| r.id != held);
        let current = self
            .server_ids
            .iter()
            .find(|(_, app)| **app == held)
            .map(|(server, _)| server.clone());
        if let Some(server) = current {
            self.server_ids.remove(&server);
            let (id, request) = self.request("eth_unsubscribe", json!([server]));
            self.in_flight.insert(id, InFlight::Unsubscribe);
            out.to_server.push(request);
        }
    }

    /// A message from the server (an array: each of its items).
    /// A retry set then is due a backoff after `now`.
    pub(crate) fn on_message(&mut self, text: &str, now: Instant, out: &mut Output) {
        if text.trim_start().starts_with('[') {
            if let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(text) {
                for item in items {
                    self.on_message(item.get(), now, out);
                }
            }
            return;
        }
        let Ok(message) = serde_json::from_str::<Inbound>(text) else {
            tracing::warn!(
                message = text,
                "chainsieve-client: a message that is no JSON-RPC"
            );
            return;
        };
        if message.method.as_deref() == Some("eth_subscription") {
            if let Some(params) = message.params {
                self.notification(params, now, out);
            }
            return;
        }
        let Some(id) = message.id else { return };
        let payload = match message.error {
            Some(error) => ResponsePayload::Failure(error),
            None => ResponsePayload::Success(
                message
                    .result
                    .map(|r| r.to_owned())
                    .unwrap_or_else(|| raw("null")),
            ),
        };
        self.response(Response { id, payload }, now, out);
    }

    fn response(&mut self, response: Response, now: Instant, out: &mut Output) {
        match self.in_flight.remove(&response.id) {
            None => out.to_alloy.push(PubSubItem::Response(response)),
            Some(InFlight::Unsubscribe) => {}
            Some(InFlight::Start { start, .. }) => {
                let mut start = *start;
                match starting_point(&start.options, &response.payload) {
                    Resume::Cursor(cursor) => {
                        start
                            .options
                            .insert("resumeFrom".into(), Value::String(cursor));
                    }
                    Resume::FromBlock(block) => {
                        start
                            .options
                            .insert("fromBlock".into(), Value::String(block));
                    }
                    Resume::Now => {}
                }
                self.send_subscribe(start, out);
            }
            Some(InFlight::MadeAgain { id }) => match response.payload {
                ResponsePayload::Success(server_id) => {
                    match serde_json::from_str::<SubId>(server_id.get()) {
                        Ok(server_id) if self.subscriptions.contains_key(&id) => {
                            self.server_ids.insert(server_id, id);
                        }
                        _ => {}
                    }
                }
                ResponsePayload::Failure(error) => self.refused(id, error, now, out),
            },
            Some(InFlight::Application { .. }) => out.to_alloy.push(PubSubItem::Response(response)),
            Some(InFlight::Subscribe { start, .. }) => {
                if let ResponsePayload::Success(server_id) = &response.payload {
                    self.adopt(*start, server_id);
                }
                out.to_alloy.push(PubSubItem::Response(response));
            }
        }
    }

    /// The application's subscribe answered: a subscription whose id is
    /// the server's first one, the one alloy holds.
    fn adopt(&mut self, start: Start, server_id: &RawValue) {
        let Ok(server_id) = serde_json::from_str::<SubId>(server_id.get()) else {
            return;
        };
        let Start {
            params, options, ..
        } = start;
        let resume = match (options.get("resumeFrom"), options.get("fromBlock")) {
            (Some(Value::String(cursor)), _) => Resume::Cursor(cursor.clone()),
            (_, Some(Value::String(block))) => Resume::FromBlock(block.clone()),
            _ => Resume::Now,
        };
        let finality = options.get("finality").cloned();
        let key = subscription_key(&params, finality.as_ref());
        self.server_ids.insert(server_id.clone(), server_id.clone());
        self.subscriptions.insert(
            server_id,
            Subscription {
                params,
                finality,
                resume,
                key,
            },
        );
    }

    fn notification(&mut self, params: NotificationParams<'_>, now: Instant, out: &mut Output) {
        let Some(id) = self.server_ids.get(&params.subscription).cloned() else {
            return;
        };
        let Some(subscription) = self.subscriptions.get_mut(&id) else {
            return;
        };
        if let Some(error) = params.error {
            // The server ended it (its replay fell behind, or the nodes
            // failed it): it holds nothing of it any more.
            self.server_ids.remove(&params.subscription);
            self.refused(id, error, now, out);
            return;
        }
        if let Some(cursor) = params.cursor {
            if let Some(store) = &self.options.store {
                // Saved as it is handed over: alloy queues it for the
                // application next.
                store.save(&subscription.key, &cursor);
            }
            match &mut subscription.resume {
                // The last one's buffer, reused: one per notification.
                Resume::Cursor(last) => {
                    last.clear();
                    last.push_str(&cursor);
                }
                resume => *resume = Resume::Cursor(cursor.into_owned()),
            }
        }
        let result = params
            .result
            .map(|r| r.to_owned())
            .unwrap_or_else(|| raw("null"));
        out.to_alloy.push(PubSubItem::Notification(EthNotification {
            subscription: id,
            result,
        }));
    }

    /// The server would not resume (or ended) subscription `id`: a try
    /// again later, or a refusal for the application.
    fn refused(&mut self, id: SubId, error: ErrorPayload, now: Instant, out: &mut Output) {
        let Some(subscription) = self.subscriptions.get_mut(&id) else {
            return;
        };
        if error.code == TRY_AGAIN {
            let at = now + self.options.backoff.delay(0, rand::random());
            self.retries.push(Retry {
                at,
                generation: self.generation,
                id,
            });
            return;
        }
        let cursor = match &subscription.resume {
            Resume::Cursor(cursor) => Some(cursor.clone()),
            _ => None,
        };
        let block = cursor.as_deref().and_then(cursor_block);
        out.refusals.push(ResumeRefusedError {
            code: error.code,
            server_message: error.message.into_owned(),
            subscription: id.clone(),
            cursor,
        });
        match (self.options.on_refused, block) {
            (OnRefused::FromBlock, Some(block)) => {
                subscription.resume = Resume::FromBlock(format!("{block:#x}"));
                self.make_again(id, out);
            }
            _ => {
                self.subscriptions.remove(&id);
            }
        }
    }

    /// `eth_subscribe` of subscription `id` from its resume point, on this
    /// socket; the answer maps the new server id to `id`.
    fn make_again(&mut self, id: SubId, out: &mut Output) {
        let Some(subscription) = self.subscriptions.get(&id) else {
            return;
        };
        let mut options = serde_json::Map::new();
        match &subscription.resume {
            Resume::Cursor(cursor) => {
                options.insert("resumeFrom".into(), json!(cursor));
            }
            Resume::FromBlock(block) => {
                options.insert("fromBlock".into(), json!(block));
            }
            Resume::Now => {}
        }
        if let Some(finality) = &subscription.finality {
            options.insert("finality".into(), finality.clone());
        }
        let mut params = subscription.params.clone();
        if !options.is_empty() {
            params.push(Value::Object(options));
        }
        let (request_id, request) = self.request("eth_subscribe", Value::Array(params));
        self.in_flight
            .insert(request_id, InFlight::MadeAgain { id });
        out.to_server.push(request);
    }

    /// A new socket is open: what was in flight goes again (a transaction
    /// fails instead: it may or may not have taken effect), and every
    /// subscription is made again from its resume point.
    pub(crate) fn reconnected(&mut self, out: &mut Output) {
        self.generation += 1;
        self.retries.clear();
        self.server_ids.clear();
        for (id, in_flight) in std::mem::take(&mut self.in_flight) {
            match in_flight {
                InFlight::Application { method, .. }
                    if NOT_REPEATABLE.contains(&method.as_str()) =>
                {
                    let message = format!(
                        "the connection to chainsieve dropped before {method} was answered; \
                         it may or may not have taken effect"
                    );
                    out.to_alloy.push(PubSubItem::Response(Response {
                        id,
                        payload: ResponsePayload::Failure(ErrorPayload {
                            code: -32603,
                            message: message.into(),
                            data: None,
                        }),
                    }));
                }
                InFlight::Application { ref request, .. }
                | InFlight::Subscribe { ref request, .. }
                | InFlight::Start { ref request, .. } => {
                    out.to_server.push(request.clone());
                    self.in_flight.insert(id, in_flight);
                }
                InFlight::MadeAgain { .. } | InFlight::Unsubscribe => {}
            }
        }
        let mut ids: Vec<SubId> = self.subscriptions.keys().cloned().collect();
        ids.sort();
        for id in ids {
            self.make_again(id, out);
        }
    }

    /// When the next retry falls due.
    pub(crate) fn next_retry(&self) -> Option<Instant> {
        self.retries.iter().map(|r| r.at).min()
    }

    /// Makes again the subscriptions whose retry is due at `now` (set on
    /// this socket).
    pub(crate) fn retry_due(&mut self, now: Instant, out: &mut Output) {
        let (due, later): (Vec<Retry>, Vec<Retry>) = std::mem::take(&mut self.retries)
            .into_iter()
            .partition(|r| r.at <= now);
        self.retries = later;
        for retry in due {
            if retry.generation == self.generation {
                self.make_again(retry.id, out);
            }
        }
    }

    /// A request of ours: its id and text.
    fn request(&mut self, method: &str, params: Value) -> (Id, String) {
        self.next_id += 1;
        let id = Id::String(format!("chainsieve:{}", self.next_id));
        let text =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        (id, text)
    }
}

/// Where a new subscription starts, from the answer to our question: the
/// head cursor, or the block after the chain's last one of its finality.
fn starting_point(options: &serde_json::Map<String, Value>, answer: &ResponsePayload) -> Resume {
    let ResponsePayload::Success(result) = answer else {
        // A server without head cursors (-32601): from the first
        // notification on.
        return Resume::Now;
    };
    let result: Value = serde_json::from_str(result.get()).unwrap_or(Value::Null);
    if options.contains_key("finality") {
        let number = result["number"]
            .as_str()
            .and_then(|n| u64::from_str_radix(n.trim_start_matches("0x"), 16).ok());
        return number.map_or(Resume::Now, |n| Resume::FromBlock(format!("{:#x}", n + 1)));
    }
    match result {
        Value::String(cursor) => Resume::Cursor(cursor),
        _ => Resume::Now,
    }
}

/// The options object ending `params`, taken off it (empty if none).
fn take_options(params: &mut Vec<Value>) -> serde_json::Map<String, Value> {
    if params.len() > 1
        && params.last().is_some_and(is_options)
        && let Some(Value::Object(options)) = params.pop()
    {
        return options;
    }
    serde_json::Map::new()
}

fn is_options(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|o| !o.is_empty() && o.keys().all(|k| OPTIONS.contains(&k.as_str())))
}

fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_string()).expect("JSON text")
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::{Backoff, CursorStore, MemoryCursorStore, ResumingConnect};

    fn session(configure: impl FnOnce(ResumingConnect) -> ResumingConnect) -> Session {
        let connect = configure(ResumingConnect::new("ws://127.0.0.1:1"));
        Session::new(Arc::new(connect.options))
    }

    fn sent(out: &mut Output) -> Vec<Value> {
        out.to_server
            .drain(..)
            .map(|t| serde_json::from_str(&t).expect("JSON"))
            .collect()
    }

    fn answer(session: &mut Session, id: &Value, result: Value, out: &mut Output) {
        let text = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
        session.on_message(&text, Instant::now(), out);
    }

    fn notify(session: &mut Session, server_id: &str, n: u64, out: &mut Output) {
        let text = json!({"jsonrpc": "2.0", "method": "eth_subscription", "params": {
            "subscription": server_id, "result": {"n": n}, "cursor": format!("eth:{n}@{n}:0:ab"),
        }})
        .to_string();
        session.on_message(&text, Instant::now(), out);
    }

    /// Subscribes to newHeads as alloy would (id 7), answering the head
    /// cursor question and the subscribe (server id `0xa`).
    fn subscribed(session: &mut Session, out: &mut Output) {
        session.on_request(
            r#"{"method":"eth_subscribe","params":["newHeads"],"id":7,"jsonrpc":"2.0"}"#,
            out,
        );
        let asked = sent(out);
        assert_eq!(asked[0]["method"], "chainsieve_headCursor");
        answer(session, &asked[0]["id"], json!("eth:0@0:0:ab"), out);
        let subscribe = sent(out);
        assert_eq!(
            subscribe[0],
            json!({"jsonrpc": "2.0", "id": 7, "method": "eth_subscribe",
                   "params": ["newHeads", {"resumeFrom": "eth:0@0:0:ab"}]})
        );
        answer(session, &json!(7), json!("0xa"), out);
        assert!(matches!(&out.to_alloy[..], [PubSubItem::Response(r)] if r.id == Id::Number(7)));
        out.to_alloy.clear();
    }

    fn delivered(out: &mut Output) -> Vec<(SubId, String)> {
        out.to_alloy
            .drain(..)
            .map(|item| match item {
                PubSubItem::Notification(n) => (n.subscription, n.result.get().to_string()),
                PubSubItem::Response(r) => panic!("a notification, not {r:?}"),
            })
            .collect()
    }

    fn id(text: &str) -> SubId {
        serde_json::from_value(json!(text)).expect("an id")
    }

    #[test]
    fn a_new_subscription_starts_at_the_head_cursor_and_resumes_from_its_last_one() {
        let mut session = session(|c| c);
        let mut out = Output::default();
        subscribed(&mut session, &mut out);
        notify(&mut session, "0xa", 1, &mut out);
        assert_eq!(delivered(&mut out), [(id("0xa"), r#"{"n":1}"#.to_string())]);

        session.reconnected(&mut out);
        let again = sent(&mut out);
        assert_eq!(again.len(), 1);
        assert_eq!(
            again[0]["params"],
            json!(["newHeads", {"resumeFrom": "eth:1@1:0:ab"}])
        );
        // The old id is gone with its socket; the new one is alloy's.
        notify(&mut session, "0xa", 2, &mut out);
        assert!(delivered(&mut out).is_empty());
        answer(&mut session, &again[0]["id"], json!("0xb"), &mut out);
        assert!(out.to_alloy.is_empty(), "our subscribe's answer is ours");
        notify(&mut session, "0xb", 2, &mut out);
        assert_eq!(delivered(&mut out), [(id("0xa"), r#"{"n":2}"#.to_string())]);
    }

    #[test]
    fn requests_in_flight_go_again_and_a_transaction_fails_instead() {
        let mut session = session(|c| c);
        let mut out = Output::default();
        let call = r#"{"method":"eth_blockNumber","params":[],"id":3,"jsonrpc":"2.0"}"#;
        session.on_request(call, &mut out);
        session.on_request(
            r#"{"method":"eth_sendRawTransaction","params":["0x00"],"id":4,"jsonrpc":"2.0"}"#,
            &mut out,
        );
        out.to_server.clear();
        session.reconnected(&mut out);
        assert_eq!(out.to_server, [call]);
        match &out.to_alloy[..] {
            [
                PubSubItem::Response(Response {
                    id: Id::Number(4),
                    payload: ResponsePayload::Failure(error),
                }),
            ] => {
                assert_eq!(error.code, -32603);
                assert!(error.message.contains("may or may not have taken effect"));
            }
            other => panic!("the transaction's error: {other:?}"),
        }
    }

    #[test]
    fn a_refusal_reaches_the_application_and_the_subscription_stops() {
        let mut session = session(|c| c);
        let mut out = Output::default();
        subscribed(&mut session, &mut out);
        notify(&mut session, "0xa", 5, &mut out);
        out.to_alloy.clear();
        session.reconnected(&mut out);
        let again = sent(&mut out);
        let refusal = json!({"jsonrpc": "2.0", "id": again[0]["id"],
            "error": {"code": -32001, "message": "cursor eth:5 is older than the window"}});
        session.on_message(&refusal.to_string(), Instant::now(), &mut out);
        assert_eq!(
            out.refusals,
            [ResumeRefusedError {
                code: -32001,
                server_message: "cursor eth:5 is older than the window".into(),
                subscription: id("0xa"),
                cursor: Some("eth:5@5:0:ab".into()),
            }]
        );
        assert_eq!(
            out.refusals[0].to_string(),
            "chainsieve refused to resume subscription 0xa from cursor eth:5@5:0:ab (-32001): \
             cursor eth:5 is older than the window"
        );
        assert_eq!(session.subscription_count(), 0);
        session.reconnected(&mut out);
        assert!(
            sent(&mut out).is_empty(),
            "a stopped subscription is not made again"
        );
    }

    #[test]
    fn a_refused_subscription_may_go_on_from_its_last_block() {
        let mut session = session(|c| c.on_refused(OnRefused::FromBlock));
        let mut out = Output::default();
        subscribed(&mut session, &mut out);
        notify(&mut session, "0xa", 17, &mut out);
        let ended = json!({"jsonrpc": "2.0", "method": "eth_subscription", "params": {
            "subscription": "0xa", "error": {"code": -32001, "message": "reorganised out"}}});
        session.on_message(&ended.to_string(), Instant::now(), &mut out);
        assert_eq!(out.refusals.len(), 1);
        let again = sent(&mut out);
        assert_eq!(
            again[0]["params"],
            json!(["newHeads", {"fromBlock": "0x11"}])
        );
        assert_eq!(session.subscription_count(), 1);
    }

    #[test]
    fn try_again_is_retried_after_a_backoff_on_the_same_socket_only() {
        let mut session = session(|c| {
            c.backoff(Backoff {
                initial: Duration::from_millis(100),
                maximum: Duration::from_secs(1),
            })
        });
        let mut out = Output::default();
        subscribed(&mut session, &mut out);
        session.reconnected(&mut out);
        let again = sent(&mut out);
        let now = Instant::now();
        let busy = json!({"jsonrpc": "2.0", "id": again[0]["id"],
            "error": {"code": -32002, "message": "not yet"}});
        session.on_message(&busy.to_string(), now, &mut out);
        assert!(out.refusals.is_empty(), "{:?}", out.refusals);
        let due = session.next_retry().expect("a retry");
        assert!(due >= now + Duration::from_millis(50) && due <= now + Duration::from_millis(100));
        session.retry_due(now, &mut out);
        assert!(sent(&mut out).is_empty(), "not yet due");
        session.retry_due(due, &mut out);
        assert_eq!(sent(&mut out)[0]["method"], "eth_subscribe");

        session.on_message(&busy.to_string(), now, &mut out);
        session.reconnected(&mut out);
        assert_eq!(session.next_retry(), None, "the new socket made it again");
    }

    #[test]
    fn unsubscribe_ends_the_current_server_subscription_under_our_id() {
        let mut session = session(|c| c);
        let mut out = Output::default();
        subscribed(&mut session, &mut out);
        session.reconnected(&mut out);
        let again = sent(&mut out);
        answer(&mut session, &again[0]["id"], json!("0xb"), &mut out);
        session.on_request(
            r#"{"method":"eth_unsubscribe","params":["0xa"],"id":1,"jsonrpc":"2.0"}"#,
            &mut out,
        );
        let unsubscribe = sent(&mut out);
        assert_eq!(unsubscribe[0]["params"], json!(["0xb"]));
        assert_ne!(unsubscribe[0]["id"], json!(1), "alloy's id 1 may be in use");
        answer(&mut session, &unsubscribe[0]["id"], json!(true), &mut out);
        assert!(out.to_alloy.is_empty());
        assert_eq!(session.subscription_count(), 0);
    }

    #[test]
    fn a_stored_cursor_is_the_starting_point_and_each_delivered_one_is_saved() {
        struct Logged(MemoryCursorStore, Mutex<Vec<String>>);
        impl CursorStore for Logged {
            fn load(&self, key: &str) -> Option<String> {
                self.0.load(key)
            }
            fn save(&self, key: &str, cursor: &str) {
                self.1.lock().expect("the log").push(cursor.to_string());
                self.0.save(key, cursor);
            }
        }
        let store = Arc::new(Logged(MemoryCursorStore::default(), Mutex::default()));
        store.save(r#"["logs",{"address":"0x01"}]"#, "eth:9@4:1:cd");
        let mut session = session(|c| c.store(store.clone()));
        let mut out = Output::default();
        session.on_request(
            r#"{"method":"eth_subscribe","params":["logs",{"address":"0x01"}],"id":2,"jsonrpc":"2.0"}"#,
            &mut out,
        );
        assert_eq!(
            sent(&mut out)[0]["params"],
            json!(["logs", {"address": "0x01"}, {"resumeFrom": "eth:9@4:1:cd"}])
        );
        answer(&mut session, &json!(2), json!("0xc"), &mut out);
        notify(&mut session, "0xc", 10, &mut out);
        assert_eq!(
            store.1.lock().expect("the log").last().map(String::as_str),
            Some("eth:10@10:0:ab")
        );
    }

    #[test]
    fn a_finality_subscription_starts_after_the_last_block_of_its_grade() {
        let mut session = session(|c| c);
        let mut out = Output::default();
        session.on_request(
            r#"{"method":"eth_subscribe","params":["newHeads",{"finality":"safe"}],"id":5,"jsonrpc":"2.0"}"#,
            &mut out,
        );
        let asked = sent(&mut out);
        assert_eq!(asked[0]["method"], "eth_getBlockByNumber");
        assert_eq!(asked[0]["params"], json!(["safe", false]));
        answer(
            &mut session,
            &asked[0]["id"],
            json!({"number": "0x1f"}),
            &mut out,
        );
        assert_eq!(
            sent(&mut out)[0]["params"],
            json!(["newHeads", {"finality": "safe", "fromBlock": "0x20"}])
        );
    }
}
