//! The `logs` filter rules, geth's:
//! - `address`: a string or an array (any of them; at most 1,000);
//! - `topics`: at most 4 positions; `null` matches any topic, a nested array
//!   matches any of its topics (at most 1,000), and a `null` or an empty array
//!   at a position matches anything there;
//! - a filter with more topic positions than the log has topics does not match.
//!
//! Subscriptions are indexed by address, else by their first topic position,
//! else kept as wildcards, so matching a log costs a couple of hash lookups
//! plus the subscriptions that actually share its address or first topic.
//!
//! The rules depend on `chainsieve-filter-core` only and read logs through
//! [`LogRead`], so they serve components of every contract version: each
//! SDK's `rules_filter!` makes the `logs` filter of them. The host's
//! `eth_getLogs` matches with the same [`LogFilter`].

use chainsieve_filter_core::params::{self, ParamsError};
use chainsieve_filter_core::serde_json::Value;
use chainsieve_filter_core::{
    Emit, Key, KeyMap, KeySet, LogRead, Reach, SubscriptionId, SubscriptionIndex,
};

/// Topic positions a log can have.
const MAX_TOPIC_POSITIONS: usize = 4;

/// One filter's criteria: a `logs` subscription's, or an `eth_getLogs`
/// call's address and topics.
#[derive(Debug)]
pub struct LogFilter {
    /// Empty means any address.
    addresses: KeySet<[u8; 20]>,
    /// One entry per position; `None` matches any topic there.
    topics: Vec<Option<KeySet<[u8; 32]>>>,
}

impl LogFilter {
    fn parse(params: &str, topic: &str) -> Result<Self, ParamsError> {
        let map = params::filter_object(params, topic, &["address", "topics"])?;
        Self::new(map.get("address"), map.get("topics"))
    }

    /// The filter of a filter object's `address` and `topics` members.
    pub fn new(address: Option<&Value>, topics: Option<&Value>) -> Result<Self, ParamsError> {
        let addresses = params::hex_list::<20>(address, "address")?;
        let topics = match topics {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(positions)) => {
                if positions.len() > MAX_TOPIC_POSITIONS {
                    return Err(ParamsError::new(format!(
                        "topics has {} positions (at most {MAX_TOPIC_POSITIONS})",
                        positions.len()
                    )));
                }
                positions
                    .iter()
                    .enumerate()
                    .map(|(i, p)| position(i, p))
                    .collect::<Result<_, _>>()?
            }
            Some(other) => {
                return Err(ParamsError::new(format!(
                    "topics must be an array, got {}",
                    params::kind(other)
                )));
            }
        };
        Ok(Self {
            addresses: addresses.into_iter().collect(),
            topics,
        })
    }

    /// Whether `log` matches: one of the addresses (if any), and the
    /// topics position by position.
    pub fn matches<'a>(&self, log: &impl LogRead<'a>) -> bool {
        (self.addresses.is_empty() || self.addresses.contains(log.address()))
            && self.topics_match(log)
    }

    fn topics_match<'a>(&self, log: &impl LogRead<'a>) -> bool {
        if self.topics.len() > log.topic_count() {
            return false;
        }
        self.topics
            .iter()
            .enumerate()
            .all(|(i, wanted)| match wanted {
                None => true,
                Some(set) => log.topic(i).is_some_and(|t| set.contains(t)),
            })
    }
}

/// Parses topic position `i`: `null`, a topic, or an array of topics in
/// which a `null` (or emptiness) makes the whole position a wildcard.
fn position(i: usize, value: &Value) -> Result<Option<KeySet<[u8; 32]>>, ParamsError> {
    let what = format!("topics[{i}]");
    match value {
        Value::Null => Ok(None),
        Value::String(_) => Ok(Some(
            [params::fixed_hex::<32>(value, &what)?]
                .into_iter()
                .collect(),
        )),
        Value::Array(options) => {
            if options.len() > params::max_filter_values() {
                return Err(params::too_many(&what, options.len()));
            }
            let mut set = KeySet::default();
            let mut wildcard = options.is_empty();
            for option in options {
                match option {
                    Value::Null => wildcard = true,
                    _ => {
                        set.insert(params::fixed_hex::<32>(option, &what)?);
                    }
                }
            }
            Ok((!wildcard).then_some(set))
        }
        other => Err(ParamsError::new(format!(
            "{what} must be null, a topic or an array of topics, got {}",
            params::kind(other)
        ))),
    }
}

/// The subscriptions of `logs` on one chain.
#[derive(Debug, Default)]
pub struct LogRules {
    subscriptions: KeyMap<SubscriptionId, LogFilter>,
    by_address: SubscriptionIndex<[u8; 20]>,
    /// Subscriptions with no address but a first-position topic constraint.
    by_topic0: SubscriptionIndex<[u8; 32]>,
    /// Subscriptions constraining neither: every log reaches their topic test.
    wildcard: Vec<SubscriptionId>,
}

impl LogRules {
    /// Adds subscription `id` of `topic` (named in messages), replacing
    /// one of the same id.
    pub fn subscribe(
        &mut self,
        id: SubscriptionId,
        params: &str,
        topic: &str,
    ) -> Result<(), ParamsError> {
        let criteria = LogFilter::parse(params, topic)?;
        self.unsubscribe(id);
        match (criteria.addresses.is_empty(), criteria.topics.first()) {
            (false, _) => criteria
                .addresses
                .iter()
                .for_each(|a| self.by_address.insert(*a, id)),
            (true, Some(Some(topic0))) => topic0.iter().for_each(|t| self.by_topic0.insert(*t, id)),
            (true, _) => self.wildcard.push(id),
        }
        self.subscriptions.insert(id, criteria);
        Ok(())
    }

    pub fn unsubscribe(&mut self, id: SubscriptionId) {
        let Some(criteria) = self.subscriptions.remove(&id) else {
            return;
        };
        criteria
            .addresses
            .iter()
            .for_each(|a| self.by_address.remove(a, id));
        if let Some(Some(topic0)) = criteria.topics.first() {
            topic0.iter().for_each(|t| self.by_topic0.remove(t, id));
        }
        self.wildcard.retain(|&other| other != id);
    }

    /// Which logs subscription `id` can match: those of its addresses, else
    /// those with one of its topics at its first constrained position, else
    /// (no criteria) every log.
    pub fn reach(&self, id: SubscriptionId) -> Reach {
        let Some(criteria) = self.subscriptions.get(&id) else {
            return Reach::Any;
        };
        if !criteria.addresses.is_empty() {
            return Reach::Keys(
                criteria
                    .addresses
                    .iter()
                    .map(|a| Key::Emitter(*a))
                    .collect(),
            );
        }
        let constrained = criteria
            .topics
            .iter()
            .enumerate()
            .find_map(|(i, wanted)| wanted.as_ref().map(|set| (i, set)));
        match constrained {
            Some((i, set)) => Reach::Keys(set.iter().map(|t| Key::Topic(i as u8, *t)).collect()),
            None if criteria.topics.is_empty() => Reach::Every,
            // Wildcard positions still ask for that many topics.
            None => Reach::Any,
        }
    }

    /// Calls `emit` once for every subscription `log` goes to.
    pub fn matches<'a>(&self, log: &impl LogRead<'a>, emit: &mut impl Emit) {
        let topic0 = log
            .topic(0)
            .map(|t| self.by_topic0.get(t))
            .unwrap_or_default();
        let candidates = self
            .by_address
            .get(log.address())
            .iter()
            .chain(topic0)
            .chain(&self.wildcard);
        for &id in candidates {
            if self
                .subscriptions
                .get(&id)
                .is_some_and(|c| c.topics_match(log))
            {
                emit.emit(id);
            }
        }
    }
}

/// The fields the rules read: a 0.2 component declares these.
pub const READS: u32 = chainsieve_filter_core::projection::log_fields::ADDRESS
    | chainsieve_filter_core::projection::log_fields::TOPICS;

#[cfg(test)]
mod tests {
    use chainsieve_filter_sdk::layout::{BatchWriter, LogFields};
    use chainsieve_filter_sdk::{Filter, Source, match_batch};

    chainsieve_filter_sdk::rules_filter!(
        Logs,
        crate::LogRules,
        LogView,
        chainsieve_filter_sdk::Manifest {
            topic: "logs",
            source: Source::Logs,
            payload: chainsieve_filter_sdk::Payload::Full,
        }
    );

    const TOKEN: [u8; 20] = [0x11; 20];
    const OTHER: [u8; 20] = [0x22; 20];
    const T_A: [u8; 32] = [0xaa; 32];
    const T_B: [u8; 32] = [0xbb; 32];
    const T_C: [u8; 32] = [0xcc; 32];

    fn h<const N: usize>(bytes: &[u8; N]) -> String {
        format!(
            "\"0x{}\"",
            bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
        )
    }

    fn run(filter: &Logs, logs: &[([u8; 20], &[[u8; 32]])]) -> Vec<(u32, u64)> {
        let mut w = BatchWriter::new(Source::Logs, logs.len());
        for (address, topics) in logs {
            w.push_log(&LogFields::emitted(address, topics));
        }
        let mut pairs: Vec<_> = match_batch(filter, &w.finish())
            .expect("logs batch")
            .pairs()
            .collect();
        pairs.sort_unstable();
        pairs
    }

    fn with(subs: &[(u64, String)]) -> Logs {
        let mut f = Logs::default();
        for (id, p) in subs {
            f.subscribe(*id, p)
                .unwrap_or_else(|e| panic!("params {p}: {e}"));
        }
        f
    }

    #[test]
    fn address_string_or_array_is_an_or() {
        let f = with(&[
            (1, format!(r#"[{{"address":{}}}]"#, h(&TOKEN))),
            (
                2,
                format!(r#"[{{"address":[{},{}]}}]"#, h(&TOKEN), h(&OTHER)),
            ),
        ]);
        let got = run(&f, &[(TOKEN, &[T_A]), (OTHER, &[]), ([0x33; 20], &[T_A])]);
        assert_eq!(got, vec![(0, 1), (0, 2), (1, 2)]);
    }

    #[test]
    fn topic_positions_follow_geth() {
        let f = with(&[
            (1, format!(r#"[{{"topics":[{}]}}]"#, h(&T_A))),
            (2, format!(r#"[{{"topics":[null,{}]}}]"#, h(&T_B))),
            (3, format!(r#"[{{"topics":[[{},{}]]}}]"#, h(&T_A), h(&T_C))),
            (4, format!(r#"[{{"topics":[[{},null]]}}]"#, h(&T_B))),
            (5, format!(r#"[{{"topics":[{},null,null]}}]"#, h(&T_A))),
            (6, r#"[{"topics":[[]]}]"#.to_string()),
        ]);
        let got = run(
            &f,
            &[
                (TOKEN, &[T_A, T_B]),
                (TOKEN, &[T_C]),
                (TOKEN, &[]),
                (TOKEN, &[T_A, T_B, T_C]),
            ],
        );
        assert_eq!(
            got,
            vec![
                (0, 1),
                (0, 2),
                (0, 3),
                (0, 4),
                (0, 6),
                (1, 3),
                (1, 4),
                (1, 6),
                // Log 2 has no topics: every filter with a position fails.
                (3, 1),
                (3, 2),
                (3, 3),
                (3, 4),
                (3, 5),
                (3, 6),
            ]
        );
    }

    #[test]
    fn address_and_topics_combine() {
        let f = with(&[(
            1,
            format!(r#"[{{"address":{},"topics":[{}]}}]"#, h(&TOKEN), h(&T_A)),
        )]);
        assert_eq!(
            run(&f, &[(TOKEN, &[T_A]), (TOKEN, &[T_B]), (OTHER, &[T_A])]),
            vec![(0, 1)]
        );
    }

    #[test]
    fn empty_filter_matches_every_log() {
        let f = with(&[
            (1, "[]".into()),
            (2, "[{}]".into()),
            (3, r#"[{"address":[],"topics":[]}]"#.into()),
        ]);
        assert_eq!(run(&f, &[(TOKEN, &[])]), vec![(0, 1), (0, 2), (0, 3)]);
    }

    #[test]
    fn unsubscribe_cleans_every_index() {
        let mut f = with(&[
            (1, format!(r#"[{{"address":{}}}]"#, h(&TOKEN))),
            (2, format!(r#"[{{"topics":[[{},{}]]}}]"#, h(&T_A), h(&T_B))),
            (3, "[]".into()),
        ]);
        for id in [1, 2, 3] {
            f.unsubscribe(id);
        }
        assert!(run(&f, &[(TOKEN, &[T_A])]).is_empty());
        assert!(f.0.by_address.is_empty() && f.0.by_topic0.is_empty() && f.0.wildcard.is_empty());
    }

    #[test]
    fn bad_filters_are_refused_with_a_reason() {
        let err = |p: &str| {
            Logs::default()
                .subscribe(1, p)
                .expect_err("invalid")
                .to_string()
        };
        let t = h(&T_A);
        assert!(
            err(&format!(r#"[{{"topics":[{t},{t},{t},{t},{t}]}}]"#))
                .contains("5 positions (at most 4)")
        );
        assert!(err(r#"[{"topics":[1]}]"#).contains("topics[0] must be null, a topic or an array"));
        assert!(
            err(r#"[{"topics":["0x12"]}]"#).contains("topics[0] \"0x12\" must have 64 hex digits")
        );
        assert!(err(r#"[{"topics":{}}]"#).contains("topics must be an array"));
        assert!(err(r#"[{"address":"0xnothex"}]"#).contains("address"));
        assert!(err(r#"[{"fromBlock":"0x1"}]"#).contains("unknown filter field \"fromBlock\""));
        let many: Vec<String> = (0..1_001u32).map(|i| format!("\"0x{i:064x}\"")).collect();
        assert!(
            err(&format!(r#"[{{"topics":[[{}]]}}]"#, many.join(",")))
                .contains("too many values in topics[0]: 1001")
        );
    }
}
