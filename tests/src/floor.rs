//! The load benchmark's floor: the least a program can do to deliver the
//! workload's notifications to the same clients on the same machine, so
//! chainsieve's CPU per notification has a physical reference in the same
//! run (docs/src/benchmarks.md, The floor).
//!
//! It reads the node as chainsieve does (one connection; pending
//! transactions in full, as chainsieve ingests them, which the node
//! announces later and in larger batches than their hashes; heads; the
//! clients' logs filters), and for each batch of announcements the
//! node's socket holds at once writes each client one buffer holding every
//! frame of the batch the client subscribed to: one `write` per socket per
//! event, the least without holding notifications back. The frames are
//! chainsieve's own bytes ([`Notice::encode_to`]: the node's result, a
//! cursor of chainsieve's shape, the envelope), made once per event; no
//! runtime, no queue, no filter, nothing parsed past the subscription id
//! and the result. Two threads: one accepts and subscribes clients, one
//! relays.
//!
//! A floor, not a server: a reader too slow to drain its socket stalls
//! every other (the writes block), and nothing is checked or kept.

use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use anyhow::{Context, bail};
use chainsieve_fanout::{Notice, new_id};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio_tungstenite::tungstenite::{self, Message, WebSocket};

use crate::TIMEOUT;
use crate::load::{self, Kind};

/// A running floor; dropping it stops its threads and closes its sockets.
pub struct Floor {
    addr: SocketAddr,
    /// Set on drop: the acceptor stops at its next connection, which the
    /// drop then makes.
    stopping: Arc<AtomicBool>,
    /// The node connection's socket, shut down on drop so the relay's
    /// blocking read returns.
    upstream: TcpStream,
    threads: Vec<JoinHandle<()>>,
}

/// A client once subscribed: its socket and the id of each of its
/// subscriptions by kind.
struct Client {
    socket: TcpStream,
    subscriptions: Vec<(Kind, Arc<str>)>,
}

/// The node's socket with the four kinds subscribed.
struct Upstream {
    socket: WebSocket<TcpStream>,
    /// The kind of each upstream subscription id.
    kinds: Vec<(String, Kind)>,
}

/// Clients the acceptor has subscribed, for the relay to write to.
type Clients = Arc<Mutex<Vec<Client>>>;

impl Floor {
    /// Connects to the node at `node_ws`, makes the four kinds'
    /// subscriptions there, and serves clients on a loopback port.
    pub fn start(node_ws: &str) -> anyhow::Result<Self> {
        let (node, upstream) = subscribe_upstream(node_ws)?;
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the floor")?;
        let addr = listener.local_addr()?;
        let stopping = Arc::new(AtomicBool::new(false));
        let clients = Clients::default();
        let accepting = {
            let (clients, stopping) = (clients.clone(), stopping.clone());
            std::thread::spawn(move || accept(listener, &clients, &stopping))
        };
        let relaying = std::thread::spawn(move || relay(node, &clients));
        Ok(Self {
            addr,
            stopping,
            upstream,
            threads: vec![accepting, relaying],
        })
    }

    /// The URL clients connect to (any path).
    pub fn url(&self) -> String {
        format!("ws://{}/eth/v1/load", self.addr)
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
        let _ = self.upstream.shutdown(std::net::Shutdown::Both);
        // Wakes the acceptor's blocking `accept`.
        let _ = TcpStream::connect(self.addr);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Subscribes on the node; returns the subscriptions and a clone of the
/// TCP socket, to shut down.
fn subscribe_upstream(node_ws: &str) -> anyhow::Result<(Upstream, TcpStream)> {
    let host = node_ws
        .strip_prefix("ws://")
        .and_then(|rest| rest.split('/').next())
        .with_context(|| format!("the node's URL {node_ws} is not ws://host:port/…"))?;
    let stream = TcpStream::connect(host).with_context(|| format!("connecting to {host}"))?;
    stream.set_nodelay(true)?;
    let upstream = stream.try_clone()?;
    let (mut socket, _) =
        tungstenite::client(node_ws, stream).context("the node's WebSocket handshake")?;
    for (id, kind) in Kind::ALL.iter().enumerate() {
        let params = match kind {
            Kind::Pending => load::full_pending(),
            _ => kind.params(),
        };
        let request = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "eth_subscribe", "params": params});
        socket.send(Message::text(request.to_string()))?;
    }
    let mut kinds = Vec::new();
    while kinds.len() < Kind::ALL.len() {
        let Message::Text(text) = socket.read().context("subscribing on the node")? else {
            continue;
        };
        let answer: Value = serde_json::from_str(&text).context("the node's answer")?;
        let (Some(request), Some(id)) = (answer["id"].as_u64(), answer["result"].as_str()) else {
            continue; // a notification ahead of the last answer: not yet due
        };
        let kind = *Kind::ALL
            .get(request as usize)
            .with_context(|| format!("an answer to no request: {answer}"))?;
        kinds.push((id.to_string(), kind));
    }
    Ok((Upstream { socket, kinds }, upstream))
}

/// Accepts clients until the floor stops: the WebSocket handshake, then
/// each subscription answered with a new id and the client handed to the
/// relay (after the answers, so two threads never write one socket).
fn accept(listener: TcpListener, clients: &Clients, stopping: &AtomicBool) {
    for stream in listener.incoming() {
        if stopping.load(Ordering::Relaxed) {
            return;
        }
        // A client that fails its handshake only loses itself.
        if let Ok(client) = stream
            .map_err(anyhow::Error::from)
            .and_then(subscribe_client)
        {
            clients
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(client);
        }
    }
}

/// A subscription request, as the load clients send it.
#[derive(Deserialize)]
struct Request {
    id: u64,
    params: Value,
}

/// Handshakes and answers a client's subscriptions (the load clients send
/// theirs at once, one per kind they listen to).
fn subscribe_client(stream: TcpStream) -> anyhow::Result<Client> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    let socket = stream.try_clone()?;
    let mut ws = tungstenite::accept(stream).context("the client's handshake")?;
    let mut subscriptions = Vec::new();
    let kinds = Kind::ALL.len();
    while subscriptions.len() < kinds {
        let Message::Text(text) = ws.read().context("a subscription request")? else {
            continue;
        };
        let request: Request = serde_json::from_str(&text).context("a subscription request")?;
        let Some(&kind) = Kind::ALL
            .iter()
            .find(|kind| kind.params() == request.params)
        else {
            bail!(
                "not one of the workload's subscriptions: {}",
                request.params
            );
        };
        let id = new_id();
        let answer = serde_json::json!({"jsonrpc": "2.0", "id": request.id, "result": &*id});
        ws.send(Message::text(answer.to_string()))?;
        subscriptions.push((kind, id));
    }
    socket.set_read_timeout(None)?;
    Ok(Client {
        socket,
        subscriptions,
    })
}

/// A notification from the node, borrowed from its text.
#[derive(Deserialize)]
struct Notification<'a> {
    #[serde(borrow)]
    params: Params<'a>,
}

#[derive(Deserialize)]
struct Params<'a> {
    subscription: &'a str,
    #[serde(borrow)]
    result: &'a RawValue,
}

/// A pending transaction in full: its hash is what the clients get.
#[derive(Deserialize)]
struct Pending<'a> {
    #[serde(borrow)]
    hash: &'a RawValue,
}

/// Relays the node's notifications until its socket ends: each batch the
/// socket holds at once becomes one write per client with anything in it.
fn relay(mut node: Upstream, clients: &Clients) {
    let mut events = 0u64;
    let mut buffer = Vec::new();
    while let Ok(batch) = read_batch(&mut node.socket) {
        // The batch's notices by kind, made once: chainsieve's frame parts
        // with a cursor of its shape (`chain:position:index:tag`).
        let mut notices: [Vec<Notice>; 4] = Default::default();
        for text in &batch {
            let Ok(notification) = serde_json::from_str::<Notification>(text) else {
                continue;
            };
            let Some((_, kind)) = node
                .kinds
                .iter()
                .find(|(id, _)| id == notification.params.subscription)
            else {
                continue;
            };
            let result = notification.params.result;
            let payload = match kind {
                Kind::Pending => match serde_json::from_str::<Pending>(result.get()) {
                    Ok(pending) => pending.hash,
                    Err(_) => continue,
                },
                _ => result,
            };
            events += 1;
            let cursor = format!("eth:{events}:0:{events:016x}");
            notices[*kind as usize].push(Notice::new(payload.get(), Some(&cursor)));
        }
        let mut clients = clients.lock().unwrap_or_else(PoisonError::into_inner);
        clients.retain(|client| {
            buffer.clear();
            for (kind, id) in &client.subscriptions {
                for notice in &notices[*kind as usize] {
                    notice.encode_to(id, &mut buffer);
                }
            }
            buffer.is_empty() || (&client.socket).write_all(&buffer).is_ok()
        });
    }
}

/// The node's next notifications: one blocking read, then every message
/// already there.
fn read_batch(node: &mut WebSocket<TcpStream>) -> anyhow::Result<Vec<tungstenite::Utf8Bytes>> {
    let mut batch = Vec::new();
    if let Message::Text(text) = node.read()? {
        batch.push(text);
    }
    node.get_ref().set_nonblocking(true)?;
    let more = loop {
        match node.read() {
            Ok(Message::Text(text)) => batch.push(text),
            Ok(_) => {}
            Err(tungstenite::Error::Io(error)) if error.kind() == ErrorKind::WouldBlock => {
                break Ok(());
            }
            Err(error) => break Err(error),
        }
    };
    node.get_ref().set_nonblocking(false)?;
    more?;
    Ok(batch)
}
