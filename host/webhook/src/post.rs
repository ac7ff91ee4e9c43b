//! One POST of a delivery, and what its outcome asks for: done (2xx),
//! try again (a timeout, a connection that failed, 408, 429, 5xx; after
//! the receiver's `Retry-After` if it gave one) or a refusal recorded on
//! the webhook (any other status). Redirects are not followed: the target
//! is the URL its owner gave. Only a short excerpt of a refusal's body is
//! read. Each worker keeps its own connection ([`Line`]) between
//! deliveries (docs/src/architecture.md, Webhooks).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderMap, HeaderValue, RETRY_AFTER, USER_AGENT};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use url::{Host, Position, Url};

use super::sign;
use super::target::{Policy, Unreachable};
use chainsieve_config::WebhooksConfig;

/// The header naming the webhook.
pub const WEBHOOK: &str = "x-chainsieve-webhook";
/// The header naming the delivery: the cursor of its last notification,
/// the receiver's idempotency key.
pub const DELIVERY: &str = "x-chainsieve-delivery";

/// Bytes of a response body kept in a webhook's last error.
const EXCERPT: usize = 200;

/// The most of a 2xx answer's body read to keep its connection; a
/// longer one closes it.
const DRAINED: usize = 64 << 10;

/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3_600);

/// What a try came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The receiver answered 2xx.
    Delivered,
    /// Try again, after `after` if the receiver said when.
    Retry {
        reason: String,
        after: Option<Duration>,
    },
    /// The receiver refused the delivery (or the target is refused): a
    /// failure recorded on the webhook, tried again at the retry pace.
    Refused { reason: String },
}

/// What a POST carries besides its body.
#[derive(Clone, Copy, Debug)]
pub struct Envelope<'a> {
    pub webhook: &'a str,
    pub delivery: &'a str,
    pub secret: &'a str,
}

/// A worker's connection to its receiver, kept between its deliveries: a
/// webhook has one URL and one batch in flight, so it needs no pool (nor
/// the pool's lock and hops).
#[derive(Default)]
pub struct Line(Option<SendRequest<Full<Bytes>>>);

/// What delivers a POST: [`Poster`], or a stand-in in the worker's tests.
pub trait Transport: Send + Sync + 'static {
    fn post<'a>(
        &'a self,
        line: &'a mut Line,
        url: &'a Url,
        envelope: Envelope<'a>,
        body: Bytes,
    ) -> BoxFuture<'a, Outcome>;
}

/// The HTTP/1.1 client webhooks deliver with, over TLS (rustls, the
/// Mozilla roots) for `https://`. No proxy (it would connect to addresses
/// the policy never saw) and no redirects (the target is the URL its
/// owner gave).
pub struct Poster {
    policy: Policy,
    timeout: Duration,
    tls: TlsConnector,
}

impl std::fmt::Debug for Poster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poster")
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Why a try got no answer.
enum Failure {
    /// The target resolves only to refused addresses.
    Refused(String),
    /// No connection: try again.
    Connect(String),
    /// The connection failed during the exchange: try again.
    Exchange(hyper::Error),
}

impl Poster {
    pub fn new(config: &WebhooksConfig) -> anyhow::Result<Self> {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        Self::with_roots(config, roots)
    }

    /// A client trusting `roots` (the tests' own authority).
    fn with_roots(config: &WebhooksConfig, roots: rustls::RootCertStore) -> anyhow::Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("the webhooks' TLS versions")?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            policy: Policy {
                allow_http: config.allow_http,
                allow_private_addresses: config.allow_private_addresses,
            },
            timeout: Duration::from_millis(config.timeout_ms),
            tls: TlsConnector::from(Arc::new(tls)),
        })
    }

    /// POSTs `body`, signed now, on `line` (connected first if it is not),
    /// and reads what the answer asks for, all within the timeout.
    async fn send(
        &self,
        line: &mut Line,
        url: &Url,
        envelope: Envelope<'_>,
        body: Bytes,
    ) -> Outcome {
        let (uri, headers) = match head(url, envelope, &body) {
            Ok(head) => head,
            Err(reason) => return Outcome::Refused { reason },
        };
        let exchanged = tokio::time::timeout(self.timeout, async {
            let response = self.exchange(line, url, &uri, headers, body).await?;
            Ok(judge(line, response).await)
        });
        let failure = match exchanged.await {
            Ok(Ok(outcome)) => return outcome,
            Ok(Err(failure)) => failure,
            Err(_) => {
                line.0 = None;
                return Outcome::Retry {
                    reason: format!("no answer within {} ms", self.timeout.as_millis()),
                    after: None,
                };
            }
        };
        line.0 = None;
        match failure {
            Failure::Refused(why) => Outcome::Refused {
                reason: format!("target refused: {why}"),
            },
            Failure::Connect(why) => Outcome::Retry {
                reason: format!("could not connect: {why}"),
                after: None,
            },
            Failure::Exchange(error) => Outcome::Retry {
                reason: format!("the request failed: {}", chain_of(&error)),
                after: None,
            },
        }
    }

    /// The answer to the request: on the kept connection if it is open
    /// (once more on a new one if that one fails before answering: the
    /// receiver may have closed it meanwhile), else on a new one.
    async fn exchange(
        &self,
        line: &mut Line,
        url: &Url,
        uri: &Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Response<Incoming>, Failure> {
        if let Some(mut kept) = line.0.take().filter(|kept| !kept.is_closed()) {
            let request = request(uri.clone(), headers.clone(), body.clone());
            if kept.ready().await.is_ok()
                && let Ok(response) = kept.send_request(request).await
            {
                line.0 = Some(kept);
                return Ok(response);
            }
        }
        let mut fresh = self.connect(url).await?;
        fresh.ready().await.map_err(Failure::Exchange)?;
        let response = fresh
            .send_request(request(uri.clone(), headers, body))
            .await
            .map_err(Failure::Exchange)?;
        line.0 = Some(fresh);
        Ok(response)
    }

    /// A new connection to `url`'s host, at an address the policy allows
    /// (resolved now), over TLS for `https://`.
    async fn connect(&self, url: &Url) -> Result<SendRequest<Full<Bytes>>, Failure> {
        let (name, server) = match url.host() {
            Some(Host::Domain(domain)) => (
                domain.to_string(),
                ServerName::try_from(domain.to_string())
                    .map_err(|error| Failure::Connect(format!("{domain}: {error}"))),
            ),
            Some(Host::Ipv4(ip)) => (ip.to_string(), Ok(ServerName::from(IpAddr::V4(ip)))),
            Some(Host::Ipv6(ip)) => (ip.to_string(), Ok(ServerName::from(IpAddr::V6(ip)))),
            None => return Err(Failure::Refused(format!("{url} names no host"))),
        };
        let port = url.port_or_known_default().unwrap_or(443);
        let addrs =
            self.policy
                .resolve(&name, port)
                .await
                .map_err(|unreachable| match unreachable {
                    Unreachable::Refused(why) => Failure::Refused(why),
                    Unreachable::Unresolved(why) => Failure::Connect(why),
                })?;
        let tcp = connect_any(&addrs).await.map_err(Failure::Connect)?;
        // One request a connection at a time: send it at once.
        let _ = tcp.set_nodelay(true);
        if url.scheme() != "https" {
            return handshake(tcp).await;
        }
        let tls = self
            .tls
            .connect(server?, tcp)
            .await
            .map_err(|error| Failure::Connect(format!("TLS with {name}: {error}")))?;
        handshake(tls).await
    }
}

impl Transport for Poster {
    fn post<'a>(
        &'a self,
        line: &'a mut Line,
        url: &'a Url,
        envelope: Envelope<'a>,
        body: Bytes,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(self.send(line, url, envelope, body))
    }
}

/// The request's target (origin form) and headers, signed now.
fn head(url: &Url, envelope: Envelope<'_>, body: &[u8]) -> Result<(Uri, HeaderMap), String> {
    let uri = Uri::try_from(&url[Position::BeforePath..])
        .map_err(|error| format!("url {url} cannot be requested: {error}"))?;
    let host = HeaderValue::from_str(&url[Position::BeforeHost..Position::AfterPort])
        .map_err(|error| format!("url {url} names a host no header can carry: {error}"))?;
    let timestamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let mut headers = HeaderMap::with_capacity(8);
    headers.insert(HOST, host);
    headers.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("chainsieve/v", env!("CARGO_PKG_VERSION"))),
    );
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let mut put = |name: &'static str, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    put(WEBHOOK, envelope.webhook);
    put(DELIVERY, envelope.delivery);
    put(sign::TIMESTAMP, &timestamp.to_string());
    put(
        sign::SIGNATURE,
        &sign::signature(envelope.secret, timestamp, body),
    );
    Ok((uri, headers))
}

fn request(uri: Uri, headers: HeaderMap, body: Bytes) -> Request<Full<Bytes>> {
    let mut request = Request::new(Full::new(body));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    request
}

/// The first of `addrs` that accepts a connection; else the last error.
async fn connect_any(addrs: &[SocketAddr]) -> Result<TcpStream, String> {
    let mut last = String::from("no address");
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(tcp) => return Ok(tcp),
            Err(error) => last = format!("{addr}: {error}"),
        }
    }
    Err(last)
}

/// An HTTP/1.1 connection over `io`, driven by a task of its own until
/// its [`SendRequest`] is dropped (with the worker's [`Line`]) or the
/// receiver closes it.
async fn handshake(
    io: impl AsyncRead + AsyncWrite + Send + Unpin + 'static,
) -> Result<SendRequest<Full<Bytes>>, Failure> {
    let (sender, connection) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(Failure::Exchange)?;
    tokio::spawn(async move {
        // Its end is the worker's next try's concern.
        let _ = connection.await;
    });
    Ok(sender)
}

/// What a response asks for. A 2xx answer's body is read (up to
/// [`DRAINED`]) so its connection serves the next delivery; any other
/// closes it once its excerpt is read.
async fn judge(line: &mut Line, response: Response<Incoming>) -> Outcome {
    let status = response.status();
    let after = retry_after(response.headers(), SystemTime::now());
    let limit = if status.is_success() {
        DRAINED
    } else {
        EXCERPT
    };
    let mut body = response.into_body();
    let mut excerpt = Vec::new();
    let mut read = 0;
    let mut ended = false;
    while read <= limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(chunk) = frame.data_ref() {
                    read += chunk.len();
                    let room = EXCERPT.saturating_sub(excerpt.len());
                    excerpt.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
            }
            Some(Err(_)) => break,
            None => {
                ended = true;
                break;
            }
        }
    }
    if status.is_success() {
        if !ended {
            line.0 = None;
        }
        return Outcome::Delivered;
    }
    line.0 = None;
    let mut reason = format!("HTTP {}", status.as_u16());
    let excerpt = String::from_utf8_lossy(&excerpt);
    let excerpt = excerpt.trim();
    if !excerpt.is_empty() {
        reason.push_str(": ");
        reason.push_str(excerpt);
    }
    if status.is_redirection() {
        reason.push_str(" (redirects are not followed)");
    }
    if status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
    {
        Outcome::Retry { reason, after }
    } else {
        Outcome::Refused { reason }
    }
}

/// The delay a `Retry-After` header asks for: seconds, or an HTTP date;
/// at most an hour.
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let delay = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(now)
            .unwrap_or_default(),
    };
    Some(delay.min(MAX_RETRY_AFTER))
}

/// An error and its causes, as one line.
fn chain_of(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let next = e.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    use super::*;

    const ENVELOPE: Envelope<'static> = Envelope {
        webhook: "0x01",
        delivery: "eth:1:0:00",
        secret: "whsec_test",
    };

    /// What a receiver saw: a connection accepted, or a request (its
    /// `Host` header and body).
    #[derive(Debug, PartialEq)]
    enum Seen {
        Connection,
        Request(String, Bytes),
    }

    /// A receiver on loopback answering 200 to every request, over TLS
    /// with `tls`; with `keep_alive` false, it closes each connection
    /// after its answer.
    async fn receiver(
        tls: Option<rustls::ServerConfig>,
        keep_alive: bool,
    ) -> (u16, mpsc::UnboundedReceiver<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let port = listener.local_addr().expect("an address").port();
        let acceptor = tls.map(|tls| tokio_rustls::TlsAcceptor::from(Arc::new(tls)));
        let (seen, seeing) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = seen.send(Seen::Connection);
                let seen = seen.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let seen = seen.clone();
                        async move {
                            let host = request.headers()[HOST].to_str().unwrap_or("").to_string();
                            let body = request.into_body().collect().await.map(|b| b.to_bytes());
                            let _ = seen.send(Seen::Request(host, body.unwrap_or_default()));
                            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                        }
                    });
                    let mut server = hyper::server::conn::http1::Builder::new();
                    server.keep_alive(keep_alive);
                    match acceptor {
                        Some(acceptor) => {
                            if let Ok(tls) = acceptor.accept(tcp).await {
                                let _ = server.serve_connection(TokioIo::new(tls), service).await;
                            }
                        }
                        None => {
                            let _ = server.serve_connection(TokioIo::new(tcp), service).await;
                        }
                    }
                });
            }
        });
        (port, seeing)
    }

    /// One delivery of `{}` to `url`, on a new connection.
    async fn post_once(poster: &Poster, url: &Url) -> Outcome {
        let body = Bytes::from_static(b"{}");
        poster.send(&mut Line::default(), url, ENVELOPE, body).await
    }

    fn open() -> WebhooksConfig {
        WebhooksConfig {
            allow_http: true,
            allow_private_addresses: true,
            ..WebhooksConfig::default()
        }
    }

    /// A certificate for `localhost` and the server config presenting it.
    fn certificate() -> (CertificateDer<'static>, rustls::ServerConfig) {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .expect("a certificate");
        let der = certified.cert.der().clone();
        let key = PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![der.clone()], key.into())
            .expect("a server config");
        (der, server)
    }

    /// Over TLS to a receiver whose certificate the client trusts, two
    /// deliveries on one connection, each with the host as `Host`; a
    /// client without that authority cannot connect (and says TLS).
    #[tokio::test]
    async fn https_deliveries_are_verified_and_share_a_connection() {
        let (der, server) = certificate();
        let (port, mut seen) = receiver(Some(server), true).await;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der).expect("a root");
        let poster = Poster::with_roots(&open(), roots).expect("a client");
        let url = Url::parse(&format!("https://localhost:{port}/hook?x=1")).expect("a URL");
        let mut line = Line::default();
        for body in [&b"{\"n\":1}"[..], b"{\"n\":2}"] {
            let outcome = poster
                .send(&mut line, &url, ENVELOPE, Bytes::copy_from_slice(body))
                .await;
            assert_eq!(outcome, Outcome::Delivered);
        }
        let host = format!("localhost:{port}");
        let expected = [
            Seen::Connection,
            Seen::Request(host.clone(), Bytes::from_static(b"{\"n\":1}")),
            Seen::Request(host, Bytes::from_static(b"{\"n\":2}")),
        ];
        for expected in expected {
            assert_eq!(seen.recv().await, Some(expected));
        }
        let untrusting = Poster::new(&open()).expect("a client");
        let outcome = post_once(&untrusting, &url).await;
        let Outcome::Retry { reason, .. } = outcome else {
            panic!("a retry, got {outcome:?}");
        };
        assert!(
            reason.starts_with("could not connect: TLS with localhost"),
            "{reason}"
        );
    }

    /// A receiver that closes each connection after its answer: the next
    /// delivery goes on a new connection, delivered, not a failed try.
    #[tokio::test]
    async fn a_connection_the_receiver_closed_is_replaced() {
        let (port, mut seen) = receiver(None, false).await;
        let poster = Poster::new(&open()).expect("a client");
        let url = Url::parse(&format!("http://127.0.0.1:{port}/hook")).expect("a URL");
        let mut line = Line::default();
        for _ in 0..3 {
            let outcome = poster
                .send(&mut line, &url, ENVELOPE, Bytes::from_static(b"{}"))
                .await;
            assert_eq!(outcome, Outcome::Delivered);
        }
        let mut connections = 0;
        for _ in 0..6 {
            if seen.recv().await == Some(Seen::Connection) {
                connections += 1;
            }
        }
        assert_eq!(connections, 3);
    }

    /// A name that resolves only to refused addresses fails at connection
    /// as a refusal (recorded on the webhook), not as a network error.
    #[tokio::test]
    async fn a_connection_to_a_refused_address_is_a_refusal() {
        let config = WebhooksConfig {
            allow_http: true,
            ..WebhooksConfig::default()
        };
        let poster = Poster::new(&config).expect("a client");
        let url = Url::parse("http://localhost:9/hook").expect("a URL");
        let outcome = post_once(&poster, &url).await;
        let Outcome::Refused { reason } = outcome else {
            panic!("refused, got {outcome:?}");
        };
        assert!(
            reason.starts_with("target refused: localhost resolves to")
                && reason.contains("loopback"),
            "{reason}"
        );
    }

    #[test]
    fn retry_after_reads_seconds_or_a_date_and_is_capped() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let headers = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(RETRY_AFTER, HeaderValue::from_str(value).expect("a value"));
            headers
        };
        assert_eq!(
            retry_after(&headers("7"), now),
            Some(Duration::from_secs(7))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&later), now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(retry_after(&headers("99999"), now), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after(&headers("soon"), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }
}
