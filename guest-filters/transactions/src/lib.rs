//! Transaction matching for `bvPendingTransactions` and `bvMinedTransactions`.
//!
//! Rules (Alchemy's; docs/src/api.md, Transaction filters): a
//! transaction matches when its sender is in `fromAddress` **or** its
//! receiver is in `toAddress`; when `methodIds` is
//! given, the first four bytes of its input must also be one of them. An
//! absent or empty list is no constraint; with both address lists empty every
//! transaction passes the address test. A contract creation never matches
//! `toAddress`. At most 1,000 addresses per subscription, any case.
//!
//! Under contract 0.3 either list may name a watchlist instead
//! (`{"watchlist": <number>}`, as the host hands it on): the host tells
//! the rules, with each transaction, which watchlists its sender and
//! receiver are in ([`TransactionRules::matches_watched`]), so a watchlist
//! of a million addresses costs a lookup like a list of one.
//!
//! Subscriptions are indexed by sender and by receiver, so matching a
//! transaction costs two hash lookups whatever the number of subscriptions.
//!
//! The rules depend on `chainsieve-filter-core` only and read transactions
//! through [`TxRead`], so they serve components of every contract version:
//! each SDK's `rules_filter!` makes a topic's filter of them. (A component
//! must link one contract version's bindings only; docs/src/architecture.md,
//! Filter contract v0.2.)

use chainsieve_filter_core::params::{self, ParamsError};
use chainsieve_filter_core::serde_json::{Map, Value};
use chainsieve_filter_core::{
    Emit, Key, KeyMap, KeySet, Reach, SubscriptionId, SubscriptionIndex, TxHashRead, TxRead,
    WatchedField,
};

/// The members of a transaction topic's filter object.
const MEMBERS: [&str; 3] = ["fromAddress", "toAddress", "methodIds"];

/// One subscription's constraints, kept to answer `unsubscribe` and to test
/// the parts of a match the index does not decide.
#[derive(Debug)]
struct Constraints {
    from: KeySet<[u8; 20]>,
    to: KeySet<[u8; 20]>,
    /// The watchlists named in place of `fromAddress` and `toAddress`.
    from_list: Option<u32>,
    to_list: Option<u32>,
    /// Empty means any input.
    methods: Vec<[u8; 4]>,
}

impl Constraints {
    fn read(map: &Map<String, Value>) -> Result<Self, ParamsError> {
        let from = params::address_set(map.get("fromAddress"), "fromAddress")?;
        let to = params::address_set(map.get("toAddress"), "toAddress")?;
        let methods = params::hex_list::<4>(map.get("methodIds"), "methodIds")?;
        let listed = from.listed().len() + to.listed().len();
        if listed > params::max_filter_values() {
            return Err(params::too_many("fromAddress and toAddress", listed));
        }
        Ok(Self {
            from: from.listed().iter().copied().collect(),
            to: to.listed().iter().copied().collect(),
            from_list: from.watchlist(),
            to_list: to.watchlist(),
            methods,
        })
    }

    fn any_address(&self) -> bool {
        self.from.is_empty()
            && self.to.is_empty()
            && self.from_list.is_none()
            && self.to_list.is_none()
    }

    fn method_ok<'a>(&self, tx: &impl TxRead<'a>) -> bool {
        self.methods.is_empty() || tx.selector().is_some_and(|s| self.methods.contains(&s))
    }
}

/// The subscriptions of one transaction topic on one chain.
#[derive(Debug, Default)]
pub struct TransactionRules {
    subscriptions: KeyMap<SubscriptionId, Constraints>,
    by_from: SubscriptionIndex<[u8; 20]>,
    by_to: SubscriptionIndex<[u8; 20]>,
    /// Subscriptions with no address constraint: every transaction reaches
    /// their method test.
    any_address: Vec<SubscriptionId>,
    /// Subscriptions by the watchlist they named for senders, receivers.
    by_from_list: SubscriptionIndex<u32>,
    by_to_list: SubscriptionIndex<u32>,
}

impl TransactionRules {
    /// Adds subscription `id` of `topic` (named in messages), replacing
    /// one of the same id.
    pub fn subscribe(
        &mut self,
        id: SubscriptionId,
        params: &str,
        topic: &str,
    ) -> Result<(), ParamsError> {
        self.subscribe_object(id, &params::filter_object(params, topic, &MEMBERS)?)
    }

    /// Adds subscription `id` of a filter object already read (its
    /// members those of [`MEMBERS`]), replacing one of the same id.
    fn subscribe_object(
        &mut self,
        id: SubscriptionId,
        map: &Map<String, Value>,
    ) -> Result<(), ParamsError> {
        let constraints = Constraints::read(map)?;
        self.unsubscribe(id);
        if constraints.any_address() {
            self.any_address.push(id);
        }
        for address in &constraints.from {
            self.by_from.insert(*address, id);
        }
        for address in &constraints.to {
            self.by_to.insert(*address, id);
        }
        if let Some(list) = constraints.from_list {
            self.by_from_list.insert(list, id);
        }
        if let Some(list) = constraints.to_list {
            self.by_to_list.insert(list, id);
        }
        self.subscriptions.insert(id, constraints);
        Ok(())
    }

    pub fn unsubscribe(&mut self, id: SubscriptionId) {
        let Some(constraints) = self.subscriptions.remove(&id) else {
            return;
        };
        for address in &constraints.from {
            self.by_from.remove(address, id);
        }
        for address in &constraints.to {
            self.by_to.remove(address, id);
        }
        if let Some(list) = constraints.from_list {
            self.by_from_list.remove(&list, id);
        }
        if let Some(list) = constraints.to_list {
            self.by_to_list.remove(&list, id);
        }
        if constraints.any_address() {
            self.any_address.retain(|&other| other != id);
        }
    }

    /// Which transactions subscription `id` can match: those of its
    /// senders or receivers, else those calling one of its methods, else
    /// (no constraint) every transaction.
    pub fn reach(&self, id: SubscriptionId) -> Reach {
        let Some(c) = self.subscriptions.get(&id) else {
            return Reach::Any;
        };
        if !c.any_address() {
            let senders = c.from.iter().map(|a| Key::Sender(*a));
            let lists = [
                c.from_list.map(|l| Key::Watched(WatchedField::Sender, l)),
                c.to_list.map(|l| Key::Watched(WatchedField::Receiver, l)),
            ];
            return Reach::Keys(
                senders
                    .chain(c.to.iter().map(|a| Key::Receiver(*a)))
                    .chain(lists.into_iter().flatten())
                    .collect(),
            );
        }
        if c.methods.is_empty() {
            Reach::Every
        } else {
            Reach::Keys(c.methods.iter().map(|m| Key::Selector(*m)).collect())
        }
    }

    /// Calls `emit` once for every subscription `tx` goes to.
    #[inline(always)]
    pub fn matches<'a>(&self, tx: &impl TxRead<'a>, emit: &mut impl Emit) {
        let from = tx.from();
        let by_from = self.by_from.get(from);
        let by_to = tx.to().map_or(&[][..], |to| self.by_to.get(to));
        // Most transactions concern no subscriber: decide that without
        // setting up the per-candidate checks.
        if by_from.is_empty() && by_to.is_empty() && self.any_address.is_empty() {
            return;
        }
        self.emit_candidates(tx, by_from, by_to, emit);
    }

    /// Calls `emit` once for every subscription `tx` goes to, `watched`
    /// saying which watchlists its sender and receiver are in (contract
    /// 0.3: the host's memberships of this transaction).
    pub fn matches_watched<'a>(
        &self,
        tx: &impl TxRead<'a>,
        watched: &[(u32, WatchedField, u32)],
        emit: &mut impl Emit,
    ) {
        if watched.is_empty() {
            return self.matches(tx, emit);
        }
        let from = tx.from();
        let mut candidates: Vec<SubscriptionId> = self.by_from.get(from).to_vec();
        if let Some(to) = tx.to() {
            candidates.extend_from_slice(self.by_to.get(to));
        }
        for &(_, field, list) in watched {
            match field {
                WatchedField::Sender => candidates.extend_from_slice(self.by_from_list.get(&list)),
                WatchedField::Receiver => candidates.extend_from_slice(self.by_to_list.get(&list)),
                WatchedField::Emitter | WatchedField::Topic(_) => {}
            }
        }
        candidates.extend_from_slice(&self.any_address);
        candidates.sort_unstable();
        candidates.dedup();
        for id in candidates {
            if self.subscriptions.get(&id).is_some_and(|c| c.method_ok(tx)) {
                emit.emit(id);
            }
        }
    }

    /// Tests the candidates the indexes found for `tx` against the method
    /// constraints, each subscription once.
    fn emit_candidates<'a>(
        &self,
        tx: &impl TxRead<'a>,
        by_from: &[SubscriptionId],
        by_to: &[SubscriptionId],
        emit: &mut impl Emit,
    ) {
        let from = tx.from();
        let mut check = |id: SubscriptionId| {
            if self.subscriptions.get(&id).is_some_and(|c| c.method_ok(tx)) {
                emit.emit(id);
            }
        };
        for &id in by_from {
            check(id);
        }
        for &id in by_to {
            // Already considered through its sender.
            let seen = self
                .subscriptions
                .get(&id)
                .is_some_and(|c| c.from.contains(from));
            if !seen {
                check(id);
            }
        }
        for &id in &self.any_address {
            check(id);
        }
    }
}

/// The fields the rules read: a 0.2 component declares these.
pub const READS: u32 = chainsieve_filter_core::projection::tx_fields::FROM
    | chainsieve_filter_core::projection::tx_fields::TO
    | chainsieve_filter_core::projection::tx_fields::SELECTOR;

/// The most `transactionHashes` one `transactionReceipts` (or
/// `transactionLifecycle`) filter names, as geth takes.
pub const MAX_HASHES: usize = 200;

/// The rules of `transactionReceipts` and `transactionLifecycle`: geth's
/// `transactionHashes` (a receipt, or a turn, of one of them; absent or
/// empty, any), and-ed with the transaction rules' members
/// (docs/src/api.md, eth_subscribe: the topics `transactionReceipts` and
/// `transactionLifecycle`).
///
/// A subscription naming hashes only is indexed by hash, so following
/// many transactions costs a lookup per transaction; one naming hashes and
/// other members is matched by the transaction rules, its hashes tested
/// on what they find.
#[derive(Debug, Default)]
pub struct HashedRules {
    rules: TransactionRules,
    /// The hashes of the subscriptions the transaction rules also hold.
    hashes: KeyMap<SubscriptionId, KeySet<[u8; 32]>>,
    /// Subscriptions naming hashes only, by hash, and each one's hashes
    /// (to undo it).
    by_hash: SubscriptionIndex<[u8; 32]>,
    hash_only: KeyMap<SubscriptionId, Vec<[u8; 32]>>,
}

impl HashedRules {
    /// Adds subscription `id` of `topic` (named in messages), replacing
    /// one of the same id.
    pub fn subscribe(
        &mut self,
        id: SubscriptionId,
        params: &str,
        topic: &str,
    ) -> Result<(), ParamsError> {
        let mut map = params::filter_object(
            params,
            topic,
            &["transactionHashes", MEMBERS[0], MEMBERS[1], MEMBERS[2]],
        )?;
        let hashes = params::hex_list::<32>(map.get("transactionHashes"), "transactionHashes")?;
        if hashes.len() > MAX_HASHES {
            return Err(ParamsError::limit(format_args!(
                "too many values in transactionHashes: {} (at most {MAX_HASHES}, as geth takes)",
                hashes.len()
            )));
        }
        map.remove("transactionHashes");
        let hashes: KeySet<[u8; 32]> = hashes.into_iter().collect();
        let hash_only = map.values().all(Value::is_null) && !hashes.is_empty();
        if !hash_only {
            // Refused before anything changes: a subscription of the same
            // id stays as it was.
            Constraints::read(&map)?;
        }
        self.unsubscribe(id);
        if hash_only {
            for hash in &hashes {
                self.by_hash.insert(*hash, id);
            }
            self.hash_only.insert(id, hashes.into_iter().collect());
            return Ok(());
        }
        self.rules.subscribe_object(id, &map)?;
        if !hashes.is_empty() {
            self.hashes.insert(id, hashes);
        }
        Ok(())
    }

    pub fn unsubscribe(&mut self, id: SubscriptionId) {
        if let Some(hashes) = self.hash_only.remove(&id) {
            for hash in &hashes {
                self.by_hash.remove(hash, id);
            }
        }
        self.hashes.remove(&id);
        self.rules.unsubscribe(id);
    }

    /// The transaction rules' reach, except that a subscription naming
    /// hashes is asked about (there is no hash key): none is served as
    /// every transaction.
    pub fn reach(&self, id: SubscriptionId) -> Reach {
        if self.hash_only.contains_key(&id) {
            return Reach::Any;
        }
        match self.rules.reach(id) {
            Reach::Every if self.hashes.contains_key(&id) => Reach::Any,
            reach => reach,
        }
    }

    /// Calls `emit` once for every subscription `tx`'s receipt goes to,
    /// `watched` saying which watchlists its sender and receiver are in.
    pub fn matches_watched<'a>(
        &self,
        tx: &(impl TxRead<'a> + TxHashRead<'a>),
        watched: &[(u32, WatchedField, u32)],
        emit: &mut impl Emit,
    ) {
        let hash = tx.hash();
        emit.emit_all(self.by_hash.get(hash));
        self.rules.matches_watched(tx, watched, &mut |id| {
            if self
                .hashes
                .get(&id)
                .is_none_or(|hashes| hashes.contains(hash))
            {
                emit.emit(id);
            }
        });
    }
}

/// The fields [`HashedRules`] read: a component declares these.
pub const HASHED_READS: u32 = READS | chainsieve_filter_core::projection::tx_fields::HASH;

#[cfg(test)]
mod tests {
    use chainsieve_filter_sdk::layout::{BatchWriter, TxFields};
    use chainsieve_filter_sdk::{Filter, Manifest, Payload, Source, match_batch};

    chainsieve_filter_sdk::rules_filter!(
        F,
        crate::TransactionRules,
        TxView,
        Manifest {
            topic: "bvPendingTransactions",
            source: Source::PendingTransactions,
            payload: Payload::FullBlockvision,
        }
    );

    const A: [u8; 20] = [0xaa; 20];
    const B: [u8; 20] = [0xbb; 20];
    const C: [u8; 20] = [0xcc; 20];
    const TRANSFER: [u8; 4] = [0xa9, 0x05, 0x9c, 0xbb];

    fn hex(address: &[u8; 20]) -> String {
        format!(
            "0x{}",
            address
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
    }

    /// A test transaction: sender, receiver (`None`: a creation), input.
    type Tx<'a> = ([u8; 20], Option<[u8; 20]>, &'a [u8]);

    /// The (event, subscription) pairs of a batch of `txs`.
    fn run(filter: &F, txs: &[Tx<'_>]) -> Vec<(u32, u64)> {
        let mut w = BatchWriter::new(Source::PendingTransactions, txs.len());
        for (from, to, input) in txs {
            w.push_tx(&TxFields::call(from, to.as_ref(), input));
        }
        let mut pairs: Vec<_> = match_batch(filter, &w.finish())
            .expect("valid batch")
            .pairs()
            .collect();
        pairs.sort_unstable();
        pairs
    }

    fn subscribed(subs: &[(u64, String)]) -> F {
        let mut f = F::default();
        for (id, params) in subs {
            f.subscribe(*id, params).expect("valid params");
        }
        f
    }

    /// A watchlist in place of an address list: the transactions whose
    /// sender (or receiver) the host says is in it match, each subscription
    /// once however many ways it is reached; its reach names the watchlist.
    #[test]
    fn a_watchlist_matches_through_the_hosts_memberships() {
        use chainsieve_filter_core::{Batch, Key, Reach, WatchedField};

        let mut rules = crate::TransactionRules::default();
        let params = format!(
            r#"[{{"fromAddress":{{"watchlist":7}},"toAddress":["{}"]}}]"#,
            hex(&B)
        );
        rules
            .subscribe(1, &params, "bvMinedTransactions")
            .expect("a watchlist");
        rules
            .subscribe(
                2,
                r#"[{"toAddress":{"watchlist":8},"methodIds":["0xa9059cbb"]}]"#,
                "t",
            )
            .expect("a watchlist");
        assert_eq!(
            rules.reach(1),
            Reach::Keys(vec![
                Key::Receiver(B),
                Key::Watched(WatchedField::Sender, 7)
            ])
        );
        let mut w = BatchWriter::new(Source::MinedTransactions, 3);
        w.push_tx(&TxFields::call(&A, Some(&C), &[]));
        w.push_tx(&TxFields::call(&A, Some(&B), &TRANSFER));
        w.push_tx(&TxFields::call(&C, Some(&A), &[]));
        let bytes = w.finish();
        let batch = Batch::parse(&bytes).expect("a batch");
        let txs: Vec<_> = batch.transactions().expect("transactions").collect();
        fn matched<'a>(
            rules: &crate::TransactionRules,
            tx: &impl chainsieve_filter_core::TxRead<'a>,
            watched: &[(u32, WatchedField, u32)],
        ) -> Vec<u64> {
            let mut ids = Vec::new();
            rules.matches_watched(tx, watched, &mut |id| ids.push(id));
            ids
        }
        assert_eq!(
            matched(&rules, &txs[0], &[(0, WatchedField::Sender, 7)]),
            vec![1]
        );
        assert_eq!(
            matched(&rules, &txs[0], &[]),
            Vec::<u64>::new(),
            "no membership, no match"
        );
        assert_eq!(
            matched(
                &rules,
                &txs[1],
                &[(1, WatchedField::Sender, 7), (1, WatchedField::Receiver, 8)]
            ),
            vec![1, 2],
            "1 through its sender and its receiver, once; 2 through its receiver and method"
        );
        assert_eq!(
            matched(&rules, &txs[2], &[(2, WatchedField::Receiver, 8)]),
            Vec::<u64>::new(),
            "2 wants a transfer"
        );
        rules.unsubscribe(1);
        assert_eq!(
            matched(&rules, &txs[0], &[(0, WatchedField::Sender, 7)]),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn from_or_to_matches() {
        let f = subscribed(&[(
            1,
            format!(
                r#"[{{"fromAddress":["{}"],"toAddress":["{}"]}}]"#,
                hex(&A),
                hex(&B)
            ),
        )]);
        let got = run(
            &f,
            &[
                (A, Some(C), &[]),
                (C, Some(B), &[]),
                (C, Some(A), &[]),
                (B, Some(C), &[]),
                (A, Some(B), &[]),
            ],
        );
        // Sender A, receiver B, and both at once (reported once).
        assert_eq!(got, vec![(0, 1), (1, 1), (4, 1)]);
    }

    #[test]
    fn method_ids_are_anded_on_top() {
        let f = subscribed(&[(
            7,
            format!(
                r#"[{{"fromAddress":["{}"],"methodIds":["0xa9059cbb"]}}]"#,
                hex(&A)
            ),
        )]);
        let mut call = TRANSFER.to_vec();
        call.extend_from_slice(&[0; 64]);
        let got = run(
            &f,
            &[
                (A, Some(B), &call),
                (A, Some(B), &[0x09, 0x5e, 0xa7, 0xb3]),
                (A, Some(B), &[0xa9, 0x05]),
                (C, Some(B), &call),
            ],
        );
        assert_eq!(got, vec![(0, 7)]);
    }

    #[test]
    fn no_filter_matches_everything_and_method_only_filters_every_address() {
        let f = subscribed(&[
            (1, "[]".into()),
            (2, "[{}]".into()),
            (3, r#"[{"methodIds":["0xa9059cbb"]}]"#.into()),
            (4, "[null]".into()),
        ]);
        let got = run(&f, &[(A, Some(B), &TRANSFER), (C, None, &[])]);
        assert_eq!(
            got,
            vec![(0, 1), (0, 2), (0, 3), (0, 4), (1, 1), (1, 2), (1, 4)]
        );
    }

    #[test]
    fn contract_creation_never_matches_to_address() {
        let zero = [0u8; 20];
        let f = subscribed(&[(1, format!(r#"[{{"toAddress":["{}"]}}]"#, hex(&zero)))]);
        assert!(run(&f, &[(A, None, &[])]).is_empty());
        assert_eq!(run(&f, &[(A, Some(zero), &[])]), vec![(0, 1)]);
    }

    #[test]
    fn addresses_match_in_any_case() {
        let upper = format!("0x{}", "AB".repeat(20));
        let f = subscribed(&[(1, format!(r#"[{{"fromAddress":["{upper}"]}}]"#))]);
        assert_eq!(run(&f, &[([0xab; 20], None, &[])]), vec![(0, 1)]);
    }

    #[test]
    fn unsubscribe_removes_every_index_entry() {
        let mut f = subscribed(&[
            (
                1,
                format!(
                    r#"[{{"fromAddress":["{}"],"toAddress":["{}"]}}]"#,
                    hex(&A),
                    hex(&B)
                ),
            ),
            (2, "[]".into()),
            (3, format!(r#"[{{"fromAddress":["{}"]}}]"#, hex(&A))),
        ]);
        f.unsubscribe(1);
        f.unsubscribe(2);
        f.unsubscribe(99);
        assert_eq!(
            run(&f, &[(A, Some(B), &[]), (C, Some(B), &[])]),
            vec![(0, 3)]
        );
        f.unsubscribe(3);
        assert!(f.0.by_from.is_empty() && f.0.by_to.is_empty() && f.0.any_address.is_empty());
    }

    #[test]
    fn resubscribing_an_id_replaces_its_constraints() {
        let mut f = subscribed(&[(1, format!(r#"[{{"fromAddress":["{}"]}}]"#, hex(&A)))]);
        f.subscribe(1, &format!(r#"[{{"fromAddress":["{}"]}}]"#, hex(&B)))
            .expect("valid");
        assert_eq!(run(&f, &[(A, None, &[]), (B, None, &[])]), vec![(1, 1)]);
    }

    #[test]
    fn cost_per_event_does_not_depend_on_unrelated_subscriptions() {
        let mut f = F::default();
        for id in 0..5_000u64 {
            let mut address = [0u8; 20];
            address[..8].copy_from_slice(&id.to_be_bytes());
            f.subscribe(id, &format!(r#"[{{"fromAddress":["{}"]}}]"#, hex(&address)))
                .expect("valid");
        }
        // The subscriptions live in the index, not in a list scanned per event.
        assert!(f.0.any_address.is_empty());
        let mut address = [0u8; 20];
        address[..8].copy_from_slice(&4_321u64.to_be_bytes());
        assert_eq!(run(&f, &[(address, None, &[])]), vec![(0, 4_321)]);
    }

    /// `transactionHashes` and-ed with the other members; hash-only
    /// subscriptions found by hash, each once however often its hash is
    /// named; their reach asks the component (there is no hash key);
    /// unsubscribing undoes each.
    #[test]
    fn receipts_match_by_hash_and_the_other_members() {
        use chainsieve_filter_core::{Batch, Reach, TxHashRead, TxRead, WatchedField};

        let hashes = [[1u8; 32], [2; 32], [3; 32]];
        let mut w = BatchWriter::new(Source::MinedTransactions, 3);
        for (hash, (from, to, input)) in hashes.iter().zip([
            (&A, &B, &TRANSFER[..]),
            (&A, &C, &[][..]),
            (&C, &B, &[][..]),
        ]) {
            w.push_tx(&TxFields {
                hash,
                ..TxFields::call(from, Some(to), input)
            });
        }
        let bytes = w.finish();
        let batch = Batch::parse(&bytes).expect("a batch");
        let txs: Vec<_> = batch.transactions().expect("transactions").collect();
        let hash = |i: usize| {
            format!(
                "0x{}",
                txs[i]
                    .hash()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            )
        };
        let mut rules = crate::HashedRules::default();
        let subscribe = |rules: &mut crate::HashedRules, id, params: String| {
            rules
                .subscribe(id, &params, "transactionReceipts")
                .unwrap_or_else(|e| panic!("{params}: {e}"))
        };
        subscribe(
            &mut rules,
            1,
            format!(
                r#"[{{"transactionHashes":["{}","{}","{}"]}}]"#,
                hash(0),
                hash(2),
                hash(0)
            ),
        );
        subscribe(
            &mut rules,
            2,
            format!(
                r#"[{{"transactionHashes":["{}","{}"],"fromAddress":["{}"]}}]"#,
                hash(1),
                hash(2),
                hex(&A)
            ),
        );
        subscribe(&mut rules, 3, "[{}]".into());
        subscribe(
            &mut rules,
            4,
            format!(
                r#"[{{"toAddress":["{}"],"methodIds":["0xa9059cbb"]}}]"#,
                hex(&B)
            ),
        );
        assert_eq!(rules.reach(1), Reach::Any);
        assert_eq!(
            rules.reach(2),
            Reach::Keys(vec![chainsieve_filter_core::Key::Sender(A)])
        );
        assert_eq!(rules.reach(3), Reach::Every);
        fn matched<'a>(
            rules: &crate::HashedRules,
            tx: &(impl TxRead<'a> + TxHashRead<'a>),
        ) -> Vec<u64> {
            let mut ids = Vec::new();
            let watched: &[(u32, WatchedField, u32)] = &[];
            rules.matches_watched(tx, watched, &mut |id| ids.push(id));
            ids.sort_unstable();
            ids
        }
        assert_eq!(matched(&rules, &txs[0]), vec![1, 3, 4]);
        assert_eq!(
            matched(&rules, &txs[1]),
            vec![2, 3],
            "2: its hash and its sender"
        );
        assert_eq!(matched(&rules, &txs[2]), vec![1, 3], "2 wants sender A too");
        let refused = format!(
            r#"[{{"transactionHashes":["{}"],"fromAddress":["0x12"]}}]"#,
            hash(0)
        );
        assert!(rules.subscribe(2, &refused, "transactionReceipts").is_err());
        assert_eq!(
            matched(&rules, &txs[1]),
            vec![2, 3],
            "a refusal leaves 2 as it was"
        );
        for id in 1..=4 {
            rules.unsubscribe(id);
        }
        assert_eq!(matched(&rules, &txs[0]), Vec::<u64>::new());
        assert!(rules.by_hash.is_empty() && rules.hash_only.is_empty() && rules.hashes.is_empty());
    }

    #[test]
    fn bad_params_are_refused_with_a_reason() {
        let err = |p: &str| {
            F::default()
                .subscribe(1, p)
                .expect_err("invalid")
                .to_string()
        };
        assert!(
            err(r#"[{"fromAddress":["0x12"]}]"#)
                .contains("fromAddress \"0x12\" must have 40 hex digits")
        );
        assert!(err(r#"[{"toAddress":"nope"}]"#).contains("toAddress \"nope\" must start with 0x"));
        assert!(err(r#"[{"methodIds":["0xa9059cbb00"]}]"#).contains("methodIds"));
        assert!(err(r#"[{"from":[]}]"#).contains("unknown filter field \"from\""));
        assert!(err(r#"[{}, {}]"#).contains("takes one parameter, got 2"));
        assert!(err(r#"["0xabc"]"#).contains("filter must be an object"));
        let many: Vec<String> = (0..600u32).map(|i| format!("\"0x{i:040x}\"")).collect();
        let msg = err(&format!(
            r#"[{{"fromAddress":[{}],"toAddress":[{}]}}]"#,
            many.join(","),
            many.join(",")
        ));
        assert!(
            msg.contains("too many values in fromAddress and toAddress: 1200"),
            "{msg}"
        );
    }
}
