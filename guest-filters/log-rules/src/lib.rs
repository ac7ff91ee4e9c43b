//! The `logs` filter rules, geth's:
//! - `address`: a string or an array (any of them; at most 1,000);
//! - `topics`: at most 4 positions; `null` matches any topic, a nested array
//!   matches any of its topics (at most 1,000), and a `null` or an empty array
//!   at a position matches anything there;
//! - a filter with more topic positions than the log has topics does not match.
//!
//! Under contract 0.3 `address`, and any topic position, may name a
//! watchlist instead (`{"watchlist": <number>}`, as the host hands it on):
//! at `address` it matches the logs its addresses emit, at a topic
//! position the logs whose topic there is one of its addresses padded to
//! 32 bytes ("ERC-20 transfers to my users" is
//! `topics: [Transfer, null, {watchlist}]`). The host tells the rules, with
//! each log, which watchlists those fields are in
//! ([`LogRules::matches_watched`]; docs/src/watchlists.md).
//!
//! Subscriptions are indexed by the first watchlist they name, else by
//! address, else by their first topic position, else kept as wildcards, so
//! matching a log costs a couple of hash lookups plus the subscriptions
//! that actually share its address, first topic or watchlists.
//!
//! The rules depend on `chainsieve-filter-core` only and read logs through
//! [`LogRead`], so they serve components of every contract version: each
//! SDK's `rules_filter!` makes the `logs` filter of them. The host's
//! `eth_getLogs` matches with the same [`LogFilter`].

use chainsieve_filter_core::params::{self, ParamsError};
use chainsieve_filter_core::serde_json::Value;
use chainsieve_filter_core::{
    Emit, Key, KeyMap, KeySet, LogRead, Reach, SubscriptionId, SubscriptionIndex, WatchedField,
};

/// Topic positions a log can have.
const MAX_TOPIC_POSITIONS: usize = 4;

/// Which watchlists one log's fields are in: (event, field, watchlist)
/// entries, as the host's memberships give them.
type Watched<'w> = &'w [(u32, WatchedField, u32)];

/// One filter's criteria: a `logs` subscription's, or an `eth_getLogs`
/// call's address and topics.
#[derive(Debug)]
pub struct LogFilter {
    /// Empty (and no `address_list`) means any address.
    addresses: KeySet<[u8; 20]>,
    /// The watchlist named in place of `address`.
    address_list: Option<u32>,
    /// One entry per position.
    topics: Vec<Position>,
}

/// What one topic position asks for.
#[derive(Debug)]
enum Position {
    /// Any topic (`null`, `[]`, or an array holding `null`).
    Any,
    /// One of these topics.
    Topics(KeySet<[u8; 32]>),
    /// An address of this watchlist, padded to 32 bytes.
    Watchlist(u32),
}

/// Where a subscription is filed in [`LogRules`]: every log it matches is
/// found through there.
enum Anchor<'a> {
    /// The first watchlist it names (every log it matches is in it).
    Watchlist(WatchedField, u32),
    Addresses(&'a KeySet<[u8; 20]>),
    Topic0(&'a KeySet<[u8; 32]>),
    Wildcard,
}

impl LogFilter {
    fn parse(params: &str, topic: &str) -> Result<Self, ParamsError> {
        let map = params::filter_object(params, topic, &["address", "topics"])?;
        Self::read(map.get("address"), map.get("topics"))
    }

    /// The filter of a call's (`eth_getLogs`) `address` and `topics`
    /// members: only a subscription names watchlists.
    pub fn new(address: Option<&Value>, topics: Option<&Value>) -> Result<Self, ParamsError> {
        let names_one = |value: &Value| value.get("watchlist").is_some();
        if address.is_some_and(names_one)
            || topics
                .and_then(Value::as_array)
                .is_some_and(|positions| positions.iter().any(names_one))
        {
            return Err(ParamsError::new(
                "a watchlist is named in a subscription's filter (eth_subscribe \"logs\", a webhook), not in a call's",
            ));
        }
        Self::read(address, topics)
    }

    fn read(address: Option<&Value>, topics: Option<&Value>) -> Result<Self, ParamsError> {
        let address = params::address_set(address, "address")?;
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
            addresses: address.listed().iter().copied().collect(),
            address_list: address.watchlist(),
            topics,
        })
    }

    /// The watchlists named, each with the field it is named on.
    fn watchlists(&self) -> impl Iterator<Item = (WatchedField, u32)> + '_ {
        let at_address = self.address_list.map(|list| (WatchedField::Emitter, list));
        let at_topics = self.topics.iter().enumerate().filter_map(|(i, p)| match p {
            Position::Watchlist(list) => Some((WatchedField::Topic(i as u8), *list)),
            _ => None,
        });
        at_address.into_iter().chain(at_topics)
    }

    fn anchor(&self) -> Anchor<'_> {
        if let Some((field, list)) = self.watchlists().next() {
            return Anchor::Watchlist(field, list);
        }
        match self.topics.first() {
            _ if !self.addresses.is_empty() => Anchor::Addresses(&self.addresses),
            Some(Position::Topics(topic0)) => Anchor::Topic0(topic0),
            _ => Anchor::Wildcard,
        }
    }

    /// Whether `log` matches: one of the addresses (if any), and the
    /// topics position by position.
    pub fn matches<'a>(&self, log: &impl LogRead<'a>) -> bool {
        self.matches_watched(log, &[])
    }

    /// Whether `log`, whose fields are in the watchlists `watched`, matches.
    fn matches_watched<'a>(&self, log: &impl LogRead<'a>, watched: Watched<'_>) -> bool {
        let address = match self.address_list {
            Some(list) => is_in(watched, WatchedField::Emitter, list),
            None => self.addresses.is_empty() || self.addresses.contains(log.address()),
        };
        address && self.topics_match(log, watched)
    }

    fn topics_match<'a>(&self, log: &impl LogRead<'a>, watched: Watched<'_>) -> bool {
        if self.topics.len() > log.topic_count() {
            return false;
        }
        self.topics
            .iter()
            .enumerate()
            .all(|(i, wanted)| match wanted {
                Position::Any => true,
                Position::Topics(set) => log.topic(i).is_some_and(|t| set.contains(t)),
                Position::Watchlist(list) => is_in(watched, WatchedField::Topic(i as u8), *list),
            })
    }
}

/// Whether `watched` says the log's `field` is in watchlist `list`.
fn is_in(watched: Watched<'_>, field: WatchedField, list: u32) -> bool {
    watched.iter().any(|&(_, f, l)| f == field && l == list)
}

/// Parses topic position `i`: `null`, a topic, an array of topics in
/// which a `null` (or emptiness) makes the whole position a wildcard, or a
/// watchlist.
fn position(i: usize, value: &Value) -> Result<Position, ParamsError> {
    let what = format!("topics[{i}]");
    match value {
        Value::Null => Ok(Position::Any),
        Value::String(_) => Ok(Position::Topics(
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
            Ok(if wildcard {
                Position::Any
            } else {
                Position::Topics(set)
            })
        }
        Value::Object(_) => params::watchlist(value, &what).map(Position::Watchlist),
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
    /// Subscriptions naming a watchlist, by the first one they name.
    by_watchlist: SubscriptionIndex<(WatchedField, u32)>,
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
        match criteria.anchor() {
            Anchor::Watchlist(field, list) => self.by_watchlist.insert((field, list), id),
            Anchor::Addresses(addresses) => addresses
                .iter()
                .for_each(|a| self.by_address.insert(*a, id)),
            Anchor::Topic0(topic0) => topic0.iter().for_each(|t| self.by_topic0.insert(*t, id)),
            Anchor::Wildcard => self.wildcard.push(id),
        }
        self.subscriptions.insert(id, criteria);
        Ok(())
    }

    pub fn unsubscribe(&mut self, id: SubscriptionId) {
        let Some(criteria) = self.subscriptions.remove(&id) else {
            return;
        };
        match criteria.anchor() {
            Anchor::Watchlist(field, list) => self.by_watchlist.remove(&(field, list), id),
            Anchor::Addresses(addresses) => {
                addresses.iter().for_each(|a| self.by_address.remove(a, id))
            }
            Anchor::Topic0(topic0) => topic0.iter().for_each(|t| self.by_topic0.remove(t, id)),
            Anchor::Wildcard => self.wildcard.retain(|&other| other != id),
        }
    }

    /// Which logs subscription `id` can match: those in the watchlists it
    /// names (the host then tells their memberships), else those of its
    /// addresses, else those with one of its topics at its first
    /// constrained position, else (no criteria) every log.
    pub fn reach(&self, id: SubscriptionId) -> Reach {
        let Some(criteria) = self.subscriptions.get(&id) else {
            return Reach::Any;
        };
        // Every watchlist it names is a key: the host tells memberships of
        // the watchlists keyed only, and a match is in each of them.
        let watched: Vec<Key> = criteria
            .watchlists()
            .map(|(field, list)| Key::Watched(field, list))
            .collect();
        if !watched.is_empty() {
            return Reach::Keys(watched);
        }
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
            .find_map(|(i, wanted)| match wanted {
                Position::Topics(set) => Some((i, set)),
                _ => None,
            });
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
                .is_some_and(|c| c.topics_match(log, &[]))
            {
                emit.emit(id);
            }
        }
    }

    /// Calls `emit` once for every subscription `log` goes to, `watched`
    /// saying which watchlists its address and topics are in (contract
    /// 0.3: the host's memberships of this log).
    pub fn matches_watched<'a>(
        &self,
        log: &impl LogRead<'a>,
        watched: Watched<'_>,
        emit: &mut impl Emit,
    ) {
        if watched.is_empty() {
            return self.matches(log, emit);
        }
        // A subscription filed under a watchlist of the log's is a
        // candidate besides those `matches` finds; each is tested whole.
        let mut candidates: Vec<SubscriptionId> = self.by_address.get(log.address()).to_vec();
        if let Some(topic0) = log.topic(0) {
            candidates.extend_from_slice(self.by_topic0.get(topic0));
        }
        for &(_, field, list) in watched {
            candidates.extend_from_slice(self.by_watchlist.get(&(field, list)));
        }
        candidates.extend_from_slice(&self.wildcard);
        candidates.sort_unstable();
        candidates.dedup();
        for id in candidates {
            if self
                .subscriptions
                .get(&id)
                .is_some_and(|c| c.matches_watched(log, watched))
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

    /// A watchlist at `address` or at a topic position: the logs whose
    /// field the host says is in it match, each subscription once however
    /// many ways it is reached, with the other positions still tested;
    /// its reach names every watchlist it names.
    #[test]
    fn a_watchlist_matches_through_the_hosts_memberships() {
        use chainsieve_filter_core::{Batch, Key, LogRead, Reach, WatchedField};

        let mut rules = crate::LogRules::default();
        // Transfers to a member of watchlist 7, of any token.
        let to_users = format!(r#"[{{"topics":[{},null,{{"watchlist":7}}]}}]"#, h(&T_A));
        rules.subscribe(1, &to_users, "logs").expect("a watchlist");
        // Anything emitted by a member of 8 whose topic 1 is in 7.
        let emitted = r#"[{"address":{"watchlist":8},"topics":[null,{"watchlist":7}]}]"#;
        rules.subscribe(2, emitted, "logs").expect("two watchlists");
        rules
            .subscribe(3, &format!(r#"[{{"address":{}}}]"#, h(&TOKEN)), "logs")
            .expect("a list");
        assert_eq!(
            rules.reach(1),
            Reach::Keys(vec![Key::Watched(WatchedField::Topic(2), 7)])
        );
        assert_eq!(
            rules.reach(2),
            Reach::Keys(vec![
                Key::Watched(WatchedField::Emitter, 8),
                Key::Watched(WatchedField::Topic(1), 7)
            ])
        );
        let mut w = BatchWriter::new(Source::Logs, 3);
        w.push_log(&LogFields::emitted(&TOKEN, &[T_A, T_B, T_C]));
        w.push_log(&LogFields::emitted(&OTHER, &[T_B, T_C]));
        w.push_log(&LogFields::emitted(&OTHER, &[T_A, T_B]));
        let bytes = w.finish();
        let batch = Batch::parse(&bytes).expect("a batch");
        let logs: Vec<_> = batch.logs().expect("logs").collect();
        fn matched<'a>(
            rules: &crate::LogRules,
            log: &impl LogRead<'a>,
            watched: &[(u32, WatchedField, u32)],
        ) -> Vec<u64> {
            let mut ids = Vec::new();
            rules.matches_watched(log, watched, &mut |id| ids.push(id));
            ids
        }
        let topic2_in_7 = (0, WatchedField::Topic(2), 7);
        assert_eq!(matched(&rules, &logs[0], &[topic2_in_7]), vec![1, 3]);
        assert_eq!(matched(&rules, &logs[0], &[]), vec![3], "no membership");
        assert_eq!(
            matched(&rules, &logs[1], &[(1, WatchedField::Topic(1), 7)]),
            Vec::<u64>::new(),
            "2 also wants its emitter in 8"
        );
        assert_eq!(
            matched(
                &rules,
                &logs[1],
                &[
                    (1, WatchedField::Emitter, 8),
                    (1, WatchedField::Topic(1), 7),
                    (1, WatchedField::Topic(1), 7)
                ]
            ),
            vec![2],
            "once"
        );
        assert_eq!(
            matched(&rules, &logs[2], &[(2, WatchedField::Topic(2), 7)]),
            Vec::<u64>::new(),
            "log 2 has no topic 2"
        );
        rules.unsubscribe(1);
        rules.unsubscribe(2);
        assert_eq!(matched(&rules, &logs[0], &[topic2_in_7]), vec![3]);
        assert!(rules.by_watchlist.is_empty());
    }

    /// A call's filter (`eth_getLogs`) names no watchlist; a subscription's
    /// names one in the one shape the host hands on.
    #[test]
    fn a_watchlist_is_a_subscriptions_only_in_its_one_shape() {
        use chainsieve_filter_core::serde_json::json;
        for (address, topics) in [
            (json!({"watchlist": 1}), json!(null)),
            (json!(null), json!([null, {"watchlist": "users"}])),
        ] {
            let refused =
                crate::LogFilter::new(Some(&address), Some(&topics)).expect_err("a call's filter");
            assert!(refused.to_string().contains("not in a call's"), "{refused}");
        }
        let err = |p: &str| {
            Logs::default()
                .subscribe(1, p)
                .expect_err("invalid")
                .to_string()
        };
        assert!(
            err(r#"[{"topics":[null,{"watchlist":"users"}]}]"#).contains(
                "topics[1] must be a hex string, an array of them, or {\"watchlist\": name}"
            )
        );
        assert!(err(r#"[{"address":{"watchlist":1,"x":2}}]"#).contains("address must be"));
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
