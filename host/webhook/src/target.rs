//! Where a webhook may deliver: `https://` (or `http://` where the
//! operator allows it), and only to public addresses unless the operator
//! allows others. The address rule is checked at creation and again on
//! every address each connection resolves to ([`Policy::resolve`]), so a
//! name that later resolves to an inner address (DNS rebinding) is
//! refused too.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures_util::future::BoxFuture;
use url::Url;

/// How long a target's name may take to resolve; past it, the name is
/// unresolved (a creation is refused saying so, a delivery is retried).
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves names to addresses: the system's resolver ([`System`]), or a
/// test's.
pub trait Resolve: Send + Sync {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>>;
}

/// The system's resolver (`getaddrinfo`, through tokio).
#[derive(Debug)]
pub struct System;

impl Resolve for System {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// What the operator allows of a target (`[webhooks]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub allow_http: bool,
    pub allow_private_addresses: bool,
}

impl Policy {
    /// The URL if its scheme and host may be delivered to; else why not.
    /// A host given as a name is resolved at each connection.
    pub fn check_url(&self, text: &str) -> Result<Url, String> {
        let url =
            Url::parse(text).map_err(|error| format!("url {text:?} is not a URL: {error}"))?;
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            "http" => {
                return Err(format!(
                    "url {text:?} is plain http; this server delivers only to https:// (the operator may allow http with [webhooks] allow_http)"
                ));
            }
            other => return Err(format!("url {text:?} must be https://, not {other}://")),
        }
        // Never echoed: the URL is shown by webhook_get and in logs.
        if !url.username().is_empty() || url.password().is_some() {
            return Err("the url carries credentials (user:password@); a receiver authenticates deliveries by their signature (X-Chainsieve-Signature), and webhook_get shows the url".into());
        }
        let Some(host) = url.host() else {
            return Err(format!("url {text:?} names no host"));
        };
        let literal = match host {
            url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
            url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
            url::Host::Domain(_) => None,
        };
        if let Some(ip) = literal {
            self.check_address(ip)
                .map_err(|why| format!("url {text:?} is {why}"))?;
        }
        Ok(url)
    }

    /// Whether an address may be connected to; else what kind it is.
    pub fn check_address(&self, ip: IpAddr) -> Result<(), String> {
        match non_public(ip) {
            Some(kind) if !self.allow_private_addresses => Err(format!(
                "{ip}, {kind} address (the operator may allow such targets with [webhooks] allow_private_addresses)"
            )),
            _ => Ok(()),
        }
    }

    /// Resolves `host` with `resolver` and checks what it resolves to:
    /// every address refused is an error naming the first.
    pub async fn check_host(
        &self,
        resolver: &dyn Resolve,
        host: &str,
        port: u16,
    ) -> Result<(), String> {
        self.resolve_with(resolver, host, port)
            .await
            .map(|_| ())
            .map_err(|error| match error {
                Unreachable::Unresolved(why) | Unreachable::Refused(why) => why,
            })
    }

    /// The addresses `host` resolves to that may be connected to, at
    /// every connection.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Unreachable> {
        self.resolve_with(&System, host, port).await
    }

    /// [`Policy::resolve`] with `resolver`, within [`RESOLVE_TIMEOUT`].
    async fn resolve_with(
        &self,
        resolver: &dyn Resolve,
        host: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, Unreachable> {
        let addrs = tokio::time::timeout(RESOLVE_TIMEOUT, resolver.lookup(host, port))
            .await
            .map_err(|_| {
                Unreachable::Unresolved(format!(
                    "{host} did not resolve within {} s",
                    RESOLVE_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|error| {
                Unreachable::Unresolved(format!("{host} could not be resolved: {error}"))
            })?;
        allowed(*self, host, addrs.into_iter()).map_err(Unreachable::Refused)
    }
}

/// Why a host cannot be connected to.
#[derive(Debug, PartialEq, Eq)]
pub enum Unreachable {
    /// Its name did not resolve (maybe for now).
    Unresolved(String),
    /// It resolves only to addresses the policy refuses.
    Refused(String),
}

/// What kind of non-public address `ip` is, if it is one.
fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Some("a loopback")
            } else if v4.is_private() {
                Some("a private")
            } else if v4.is_link_local() {
                Some("a link-local")
            } else if v4.is_unspecified() || a == 0 {
                Some("an unspecified")
            } else if a == 100 && (64..128).contains(&b) {
                Some("a shared (carrier-grade NAT)")
            } else if (a == 192 && b == 0 && v4.octets()[2] == 0)
                || (a == 198 && (18..20).contains(&b))
            {
                Some("a reserved (protocol assignments, benchmarking)")
            } else if v4.is_multicast() || v4.is_broadcast() || a >= 240 {
                Some("a multicast or reserved")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return non_public(IpAddr::V4(v4));
            }
            if v6.is_loopback() {
                Some("a loopback")
            } else if v6.is_unique_local() {
                Some("a private (unique local)")
            } else if v6.is_unicast_link_local() {
                Some("a link-local")
            } else if v6.is_unspecified() {
                Some("an unspecified")
            } else if v6.is_multicast() {
                Some("a multicast")
            } else {
                None
            }
        }
    }
}

/// The IPv4 address an IPv6 one carries, where it reaches that IPv4
/// host: mapped (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`), NAT64
/// (`64:ff9b::/96`) and 6to4 (`2002::/16`).
fn embedded_v4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let v4 = |high: u16, low: u16| {
        let [a, b] = high.to_be_bytes();
        let [c, d] = low.to_be_bytes();
        std::net::Ipv4Addr::new(a, b, c, d)
    };
    match s {
        [0, 0, 0, 0, 0, 0xffff, high, low] => Some(v4(high, low)),
        // `::` and `::1` are themselves, not IPv4 hosts.
        [0, 0, 0, 0, 0, 0, high, low] if high != 0 => Some(v4(high, low)),
        [0x64, 0xff9b, 0, 0, 0, 0, high, low] => Some(v4(high, low)),
        [0x2002, high, low, ..] => Some(v4(high, low)),
        _ => None,
    }
}

/// The addresses of `addrs` the policy allows; an error if none is.
fn allowed(
    policy: Policy,
    host: &str,
    addrs: impl Iterator<Item = SocketAddr>,
) -> Result<Vec<SocketAddr>, String> {
    let mut refused = None;
    let mut kept = Vec::new();
    for addr in addrs {
        match policy.check_address(addr.ip()) {
            Ok(()) => kept.push(addr),
            Err(why) => {
                refused.get_or_insert(why);
            }
        }
    }
    if kept.is_empty() {
        return Err(match refused {
            Some(why) => format!("{host} resolves to {why}"),
            None => format!("{host} resolves to no address"),
        });
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    const STRICT: Policy = Policy {
        allow_http: false,
        allow_private_addresses: false,
    };

    #[test]
    fn only_https_unless_http_is_allowed() {
        STRICT.check_url("https://example.com/hook").expect("https");
        let error = STRICT
            .check_url("https://user:hunter2@example.com/hook")
            .expect_err("credentials");
        assert!(
            error.starts_with("the url carries credentials") && !error.contains("hunter2"),
            "{error}"
        );
        let error = STRICT
            .check_url("http://example.com/hook")
            .expect_err("http");
        assert!(error.contains("allow_http"), "{error}");
        let lenient = Policy {
            allow_http: true,
            ..STRICT
        };
        lenient
            .check_url("http://example.com/hook")
            .expect("allowed");
        let error = lenient.check_url("ftp://example.com").expect_err("ftp");
        assert!(error.contains("ftp://"), "{error}");
        assert!(STRICT.check_url("not a url").is_err());
    }

    #[test]
    fn inner_addresses_are_refused_unless_allowed() {
        for inner in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::10.0.0.1",
            "64:ff9b::a00:1",
            "2002:c0a8:101::1",
            "192.0.0.8",
            "198.18.0.1",
            "224.0.0.1",
        ] {
            let ip = IpAddr::from_str(inner).expect("an address");
            assert!(STRICT.check_address(ip).is_err(), "{inner} refused");
            let open = Policy {
                allow_private_addresses: true,
                ..STRICT
            };
            open.check_address(ip).expect("allowed");
        }
        for public in [
            "93.184.216.34",
            "2606:2800:220:1::1",
            "1.1.1.1",
            "64:ff9b::101:101",
            "2002:101:101::1",
        ] {
            let ip = IpAddr::from_str(public).expect("an address");
            STRICT.check_address(ip).expect("public");
        }
        let error = STRICT
            .check_url("https://[::1]:8443/hook")
            .expect_err("a literal loopback");
        assert!(
            error.contains("loopback") && error.contains("allow_private_addresses"),
            "{error}"
        );
    }

    /// A name is judged by what it resolves to, at every connection: the
    /// client's resolver drops the refused addresses and fails if none is
    /// left.
    #[tokio::test]
    async fn names_are_judged_by_what_they_resolve_to() {
        let error = STRICT
            .check_host(&System, "localhost", 443)
            .await
            .expect_err("loopback");
        assert!(
            error.starts_with("localhost resolves to") && error.contains("loopback"),
            "{error}"
        );
        let resolved = STRICT.resolve("localhost", 443).await;
        assert!(
            matches!(&resolved, Err(Unreachable::Refused(why)) if why.contains("loopback")),
            "{resolved:?}"
        );
        let open = Policy {
            allow_private_addresses: true,
            ..STRICT
        };
        let addrs = open.resolve("localhost", 443).await.expect("allowed");
        assert!(!addrs.is_empty());
        let mixed = [
            SocketAddr::from(([127, 0, 0, 1], 1)),
            SocketAddr::from(([1, 1, 1, 1], 1)),
        ];
        assert_eq!(
            allowed(STRICT, "mixed", mixed.into_iter()).expect("one is public"),
            [SocketAddr::from(([1, 1, 1, 1], 1))]
        );
    }
}
