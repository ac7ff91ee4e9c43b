//! One POST of a delivery, and what its outcome asks for: done (2xx),
//! try again (a timeout, a connection that failed, 408, 429, 5xx; after
//! the receiver's `Retry-After` if it gave one) or a refusal recorded on
//! the webhook (any other status). Redirects are not followed: the target
//! is the URL its owner gave. Only a short excerpt of a response body is
//! read.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{Client, StatusCode, Url};

use super::sign;
use super::target::{self, Policy};
use crate::config::WebhooksConfig;

/// The header naming the webhook.
pub const WEBHOOK: &str = "x-chainsieve-webhook";
/// The header naming the delivery: the cursor of its last notification,
/// the receiver's idempotency key.
pub const DELIVERY: &str = "x-chainsieve-delivery";

/// Bytes of a response body kept in a webhook's last error.
const EXCERPT: usize = 200;

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

/// What delivers a POST: [`Poster`], or a stand-in in the worker's tests.
pub trait Transport: Send + Sync + 'static {
    fn post<'a>(
        &'a self,
        url: &'a Url,
        envelope: Envelope<'a>,
        body: Bytes,
    ) -> BoxFuture<'a, Outcome>;
}

/// The HTTP client webhooks deliver with: one connection pool for all.
#[derive(Clone, Debug)]
pub struct Poster {
    client: Client,
    timeout: Duration,
}

impl Poster {
    pub fn new(config: &WebhooksConfig) -> anyhow::Result<Self> {
        let policy = Policy {
            allow_http: config.allow_http,
            allow_private_addresses: config.allow_private_addresses,
        };
        let timeout = Duration::from_millis(config.timeout_ms);
        let client = Client::builder()
            .user_agent(concat!("chainsieve/v", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would connect to addresses the policy never saw.
            .no_proxy()
            .dns_resolver(target::resolver(policy))
            .timeout(timeout)
            .build()
            .map_err(|error| anyhow::anyhow!("building the webhooks' HTTP client: {error}"))?;
        Ok(Self { client, timeout })
    }

    /// POSTs `body`, signed now, and reads what the answer asks for.
    async fn send(&self, url: &Url, envelope: Envelope<'_>, body: Bytes) -> Outcome {
        let timestamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let mut headers = HeaderMap::new();
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
            &sign::signature(envelope.secret, timestamp, &body),
        );
        let sent = self
            .client
            .post(url.clone())
            .headers(headers)
            .body(body)
            .send()
            .await;
        match sent {
            Ok(response) => judge(response).await,
            Err(error) => self.failed(&error),
        }
    }

    fn failed(&self, error: &reqwest::Error) -> Outcome {
        if let Some(refused) = address_refused(error) {
            return Outcome::Refused {
                reason: format!("target refused: {refused}"),
            };
        }
        let reason = if error.is_timeout() {
            format!("no answer within {} ms", self.timeout.as_millis())
        } else if error.is_connect() {
            format!("could not connect: {}", chain_of(error))
        } else {
            format!("the request failed: {}", chain_of(error))
        };
        Outcome::Retry {
            reason,
            after: None,
        }
    }
}

impl Transport for Poster {
    fn post<'a>(
        &'a self,
        url: &'a Url,
        envelope: Envelope<'a>,
        body: Bytes,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(self.send(url, envelope, body))
    }
}

/// What a response asks for.
async fn judge(mut response: reqwest::Response) -> Outcome {
    let status = response.status();
    if status.is_success() {
        return Outcome::Delivered;
    }
    let after = retry_after(response.headers(), SystemTime::now());
    let mut excerpt = Vec::new();
    while excerpt.len() < EXCERPT {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                excerpt.extend_from_slice(&chunk[..chunk.len().min(EXCERPT - excerpt.len())])
            }
            _ => break,
        }
    }
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

/// The address policy's refusal, if that is why the connection failed.
fn address_refused(error: &reqwest::Error) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(refused) = e.downcast_ref::<target::Refused>() {
            return Some(refused.to_string());
        }
        cause = e.source();
    }
    None
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
    use super::*;

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
        let envelope = Envelope {
            webhook: "0x01",
            delivery: "eth:1:0:00",
            secret: "whsec_test",
        };
        let outcome = poster.send(&url, envelope, Bytes::from_static(b"{}")).await;
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
