//! The process's role and the `[bus]` section: several servers on NATS
//! JetStream, ingest once and serve from many edges (docs/src/architecture.md,
//! The bus).

use std::str::FromStr;
use std::time::Duration;

use anyhow::bail;
use serde::{Deserialize, Serialize};

/// What this process does (`role` in the config, `--role` on the command
/// line).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// One process, no bus: sources, filters and clients together.
    #[default]
    All,
    /// Reads each chain's node and publishes its log to the bus; serves no
    /// client (health, readiness and metrics only).
    Ingest,
    /// Reads each chain's log from the bus and serves clients; takes no
    /// events from a node.
    Edge,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::All => "all",
            Role::Ingest => "ingest",
            Role::Edge => "edge",
        }
    }
}

impl FromStr for Role {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        match text {
            "all" => Ok(Role::All),
            "ingest" => Ok(Role::Ingest),
            "edge" => Ok(Role::Edge),
            other => bail!("role must be all, ingest or edge, got \"{other}\""),
        }
    }
}

/// The `[bus]` section: where the NATS servers are and what each chain's
/// stream keeps. Read by the `ingest` and `edge` roles only.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct BusConfig {
    /// NATS servers to connect to (any of a cluster's). Default
    /// `["nats://127.0.0.1:4222"]`.
    pub urls: Vec<String>,
    /// Names the bus's objects: the stream `<prefix>-<chain>` on the
    /// subject `<prefix>.<chain>.log`, and the lease bucket
    /// `<prefix>-leases`. Servers that share a prefix share the logs.
    /// Default `chainsieve`.
    pub prefix: String,
    /// The oldest step a chain's stream keeps, in seconds: how far back
    /// an edge that starts (or a client that resumes) can reach, beyond
    /// its own `[log]` window. Default 86,400 (a day).
    pub max_age_secs: u64,
    /// The most a chain's stream holds, in MiB; past it the oldest steps
    /// go first. Default 1,024.
    pub max_mib: u64,
    /// How long an ingest's hold on a chain lasts without renewal, in
    /// milliseconds: a standby takes over at most this long after the
    /// leader dies. Default 3,000.
    pub lease_ms: u64,
    /// Copies of each stream and of the lease bucket a NATS cluster keeps
    /// (JetStream's replicas: 3 survives the loss of one server). Default
    /// 1, for a single server.
    pub replicas: usize,
}

impl Default for BusConfig {
    fn default() -> Self {
        Self {
            urls: vec!["nats://127.0.0.1:4222".into()],
            prefix: "chainsieve".into(),
            max_age_secs: 86_400,
            max_mib: 1_024,
            lease_ms: 3_000,
            replicas: 1,
        }
    }
}

impl BusConfig {
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    pub fn max_age(&self) -> Duration {
        Duration::from_secs(self.max_age_secs)
    }

    /// Checks what the roles on the bus need: reachable-looking URLs and a
    /// prefix NATS accepts in stream names and subjects.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.urls.is_empty() {
            bail!("bus.urls must name at least one NATS server");
        }
        if let Some(url) = self
            .urls
            .iter()
            .find(|url| !["nats://", "tls://"].iter().any(|s| url.starts_with(s)))
        {
            bail!("bus.urls: \"{url}\" must start with nats:// or tls://");
        }
        if self.prefix.is_empty()
            || !self
                .prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            bail!(
                "bus.prefix \"{}\" must be letters, digits, '-' or '_' (it names streams and subjects)",
                self.prefix
            );
        }
        super::located::in_range("bus.max_age_secs", self.max_age_secs, 1, 10 * 365 * 86_400)?;
        super::located::in_range("bus.max_mib", self.max_mib, 1, 1 << 30)?;
        super::located::in_range("bus.lease_ms", self.lease_ms, 100, 600_000)?;
        // JetStream's own bound.
        super::located::in_range("bus.replicas", self.replicas as u64, 1, 5)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_and_name_themselves() {
        for role in [Role::All, Role::Ingest, Role::Edge] {
            assert_eq!(role.name().parse::<Role>().expect("parses"), role);
        }
        let error = "leader".parse::<Role>().expect_err("unknown");
        assert_eq!(
            error.to_string(),
            "role must be all, ingest or edge, got \"leader\""
        );
    }

    #[test]
    fn bad_bus_settings_are_refused_by_name() {
        let refused = |change: fn(&mut BusConfig)| {
            let mut bus = BusConfig::default();
            change(&mut bus);
            bus.validate().expect_err("refused").to_string()
        };
        BusConfig::default().validate().expect("defaults are valid");
        assert!(refused(|b| b.urls.clear()).contains("at least one"));
        assert!(refused(|b| b.urls = vec!["http://x:4222".into()]).contains("nats://"));
        assert!(refused(|b| b.prefix = "a.b".into()).contains("bus.prefix"));
        assert!(refused(|b| b.lease_ms = 10).contains("bus.lease_ms"));
        assert!(refused(|b| b.max_mib = 0).contains("bus.max_mib"));
        assert!(refused(|b| b.replicas = 7).contains("bus.replicas must be between 1 and 5"));
    }
}
