//! The host's side of a subscription's [`Reach`] (contract 0.2): every
//! subscription's reach, indexed, so a batch is narrowed to the events some
//! subscription can match before the component is asked, and subscriptions
//! that take every event are served without asking. Most events concern
//! no subscriber: they never cross into WASM (docs/src/architecture.md, Reach).
//!
//! A 0.3 subscription may reach the events whose field holds an address of
//! a watchlist: the host looks each such field up in the watchlists' index
//! as of the batch's view, and tells the component which events' fields
//! hit which of the watchlists named (docs/src/watchlists.md, How matching
//! scales).

use anyhow::bail;
use chainsieve_filter_core::projection::{KeyFields, Records};
use chainsieve_filter_core::{
    Broadcast, Key, KeyMap, Matches, Memberships, Reach, Source, WatchedField,
};
use chainsieve_watchlists::Index;
use chainsieve_watchlists::views::View;

use super::contract::{Delivery, Layout};

/// How many subscriptions named each key.
type Counts<K> = KeyMap<K, u32>;

/// The reach of every subscription of one component instance.
#[derive(Debug, Default)]
pub struct ReachIndex {
    /// The stream the component reads, and the fields its batches carry
    /// (`None` for a 0.1 component, whose subscriptions reach anything).
    declared: Option<(Source, u32)>,
    /// Each subscription's reach, to undo it.
    reaches: KeyMap<u64, Reach>,
    /// Subscriptions the host serves itself: every event, no call.
    every: Broadcast,
    /// How many subscriptions the component is asked about every event for.
    any: usize,
    /// How many subscriptions have keys.
    keyed: usize,
    senders: Counts<[u8; 20]>,
    receivers: Counts<[u8; 20]>,
    selectors: Counts<[u8; 4]>,
    emitters: Counts<[u8; 20]>,
    topics: [Counts<[u8; 32]>; 4],
    /// Per watched field (in [`watched_slot`] order), how many
    /// subscriptions named each watchlist.
    watched: [Counts<u32>; 7],
}

/// A watched field's place in [`ReachIndex::watched`].
fn watched_slot(field: WatchedField) -> usize {
    match field {
        WatchedField::Sender => 0,
        WatchedField::Receiver => 1,
        WatchedField::Emitter => 2,
        WatchedField::Topic(i) => 3 + usize::from(i.min(3)),
    }
}

/// The watched fields, in [`watched_slot`] order.
const WATCHED: [WatchedField; 7] = [
    WatchedField::Sender,
    WatchedField::Receiver,
    WatchedField::Emitter,
    WatchedField::Topic(0),
    WatchedField::Topic(1),
    WatchedField::Topic(2),
    WatchedField::Topic(3),
];

/// The part of a batch the component is asked about.
#[derive(Debug, PartialEq, Eq)]
pub enum Narrowed {
    /// All of it, as it is.
    Whole,
    /// None of it: no call.
    Nothing,
    /// The events at `indices`, in a batch of their own (`bytes`): the
    /// component's event `i` is the batch's `indices[i]`.
    Subset { bytes: Vec<u8>, indices: Vec<u32> },
}

impl ReachIndex {
    /// The index for a component with this stream and layout.
    pub fn new(source: Source, layout: Layout) -> Self {
        Self {
            declared: match layout {
                Layout::Whole => None,
                Layout::Projected(fields) => Some((source, fields)),
            },
            ..Self::default()
        }
    }

    /// Files subscription `id`'s reach, replacing its old one, once checked
    /// against its delivery ([`ReachIndex::check`]); refused, the old one
    /// is gone.
    pub fn insert(&mut self, id: u64, reach: Reach, delivery: Delivery) -> anyhow::Result<()> {
        self.remove(id);
        self.check(&reach, delivery)?;
        match &reach {
            Reach::Every => self.every.insert(id),
            Reach::Any => self.any += 1,
            Reach::Keys(keys) => {
                self.keyed += 1;
                for key in keys {
                    *self.counts(key) += 1;
                }
            }
        }
        self.reaches.insert(id, reach);
        Ok(())
    }

    /// Checks a component's answer for a subscription delivered `delivery`:
    /// every key is of a field the component reads, and the host can serve
    /// an `Every` itself (not when the component writes the payloads).
    fn check(&self, reach: &Reach, delivery: Delivery) -> anyhow::Result<()> {
        match reach {
            Reach::Any => Ok(()),
            _ if let (Delivery::Kind(kind), Some((source, _))) = (delivery, self.declared)
                && !kind.fits(source) =>
            {
                bail!("the filter answered {kind:?} payloads for {source:?}, which have none")
            }
            Reach::Every if delivery == Delivery::Written => {
                bail!("the filter answered `every` for a subscription it writes the payloads of")
            }
            Reach::Every => Ok(()),
            Reach::Keys(keys) => {
                let Some((source, fields)) = self.declared else {
                    bail!("a contract 0.1 filter has no keys");
                };
                for key in keys {
                    let (kind, field) = key.field();
                    if !kind.same_kind(source) || fields & field == 0 {
                        bail!(
                            "the filter keyed a subscription on {key:?}, a field its manifest does not declare"
                        );
                    }
                    if let Key::Topic(position, _) | Key::Watched(WatchedField::Topic(position), _) =
                        key
                        && *position > 3
                    {
                        bail!(
                            "the filter keyed a subscription on topic {position} (a log has 0-3)"
                        );
                    }
                }
                Ok(())
            }
        }
    }

    /// Forgets subscription `id`; unknown ids are ignored.
    pub fn remove(&mut self, id: u64) {
        let Some(reach) = self.reaches.remove(&id) else {
            return;
        };
        match &reach {
            Reach::Every => self.every.remove(id),
            Reach::Any => self.any -= 1,
            Reach::Keys(keys) => {
                self.keyed -= 1;
                for key in keys {
                    self.uncount(key);
                }
            }
        }
    }

    fn counts(&mut self, key: &Key) -> &mut u32 {
        match key {
            Key::Sender(a) => self.senders.entry(*a).or_default(),
            Key::Receiver(a) => self.receivers.entry(*a).or_default(),
            Key::Selector(s) => self.selectors.entry(*s).or_default(),
            Key::Emitter(a) => self.emitters.entry(*a).or_default(),
            Key::Topic(i, t) => self.topics[usize::from(*i)].entry(*t).or_default(),
            Key::Watched(field, list) => {
                self.watched[watched_slot(*field)].entry(*list).or_default()
            }
        }
    }

    fn uncount(&mut self, key: &Key) {
        fn down<K: std::hash::Hash + Eq>(counts: &mut Counts<K>, key: &K) {
            if let Some(n) = counts.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(key);
                }
            }
        }
        match key {
            Key::Sender(a) => down(&mut self.senders, a),
            Key::Receiver(a) => down(&mut self.receivers, a),
            Key::Selector(s) => down(&mut self.selectors, s),
            Key::Emitter(a) => down(&mut self.emitters, a),
            Key::Topic(i, t) => down(&mut self.topics[usize::from(*i)], t),
            Key::Watched(field, list) => down(&mut self.watched[watched_slot(*field)], list),
        }
    }

    /// The part of `batch` (in the component's layout) the component is
    /// asked about: the events some subscription's keys concern, all of
    /// them when a subscription reaches any event.
    ///
    /// With watched keys, `view` (the batch's view of the watchlists) says
    /// which watchlists each watched field's address is in; the answer's
    /// memberships name the events of the part asked about.
    pub fn narrow(
        &self,
        batch: &[u8],
        view: Option<&View>,
    ) -> anyhow::Result<(Narrowed, Memberships)> {
        let watching = self.watched.iter().any(|counts| !counts.is_empty());
        if (self.any > 0 && !watching) || self.declared.is_none() {
            return Ok((Narrowed::Whole, Memberships::default()));
        }
        if self.keyed == 0 {
            return Ok((Narrowed::Nothing, Memberships::default()));
        }
        let records = Records::parse(batch).map_err(anyhow::Error::msg)?;
        let fields = KeyFields::of(&records);
        let probe = Probe::of(self, fields);
        let index = view
            .filter(|_| watching)
            .map(|view| (view.index(), view.edit()));
        let mut memberships = Memberships::default();
        let mut indices = Vec::with_capacity(records.len());
        for (at, record) in records.iter().enumerate() {
            // The event's number in the part asked about; with any, the
            // whole batch is asked about.
            let event = if self.any > 0 {
                at as u32
            } else {
                indices.len() as u32
            };
            let mut concerned = self.any > 0 || probe.concerns(record);
            if let Some((index, edit)) = &index {
                concerned |=
                    self.watched_in(&fields, record, index, *edit, event, &mut memberships);
            }
            if concerned {
                indices.push(at as u32);
            }
        }
        let narrowed = if self.any > 0 || indices.len() == records.len() {
            Narrowed::Whole
        } else if indices.is_empty() {
            Narrowed::Nothing
        } else {
            Narrowed::Subset {
                bytes: records.subset(&indices),
                indices,
            }
        };
        Ok((narrowed, memberships))
    }

    /// Adds `record`'s watched memberships (as event `event`) for the
    /// watchlists some subscription named on each field; whether it has
    /// one.
    fn watched_in(
        &self,
        fields: &KeyFields,
        record: &[u8],
        index: &Index,
        edit: chainsieve_watchlists::Seq,
        event: u32,
        memberships: &mut Memberships,
    ) -> bool {
        let mut hit = false;
        for (slot, named) in self.watched.iter().enumerate() {
            if named.is_empty() {
                continue;
            }
            let field = WATCHED[slot];
            let address = match field {
                WatchedField::Sender => fields.sender(record).copied(),
                WatchedField::Receiver => fields.receiver(record).copied(),
                WatchedField::Emitter => fields.emitter(record).copied(),
                WatchedField::Topic(i) => fields
                    .topic(record, usize::from(i))
                    .and_then(padded_address),
            };
            let Some(address) = address else { continue };
            index.lists_of(&address, edit, |list| {
                if named.contains_key(&list) {
                    memberships.push(event, field, list);
                    hit = true;
                }
            });
        }
        hit
    }

    /// Sends every event of `batch` to each subscription the host serves
    /// itself, with its payload kind, in place of whatever the component
    /// (asked about other subscriptions) answered for them. The pairs go
    /// subscriber by subscriber, each one's events in order: the order the
    /// actor delivers in (`actor/pairs.rs`), so its sort finds them in one
    /// run instead of sorting a batch's events × subscribers.
    pub fn serve_every(&self, batch: &[u8], matches: &mut Matches) -> anyhow::Result<()> {
        if self.every.ids().is_empty() {
            return Ok(());
        }
        if !matches.is_empty() {
            matches.retain_subscriptions(|id| !matches!(self.reaches.get(&id), Some(Reach::Every)));
        }
        let len = Records::parse(batch).map_err(anyhow::Error::msg)?.len() as u32;
        for &id in self.every.ids() {
            for event in 0..len {
                matches.push(event, id);
            }
        }
        Ok(())
    }

    /// The matches of `batch`: `ask` (the component) answers about the
    /// part some subscription's keys concern ([`ReachIndex::narrow`]), its
    /// answer mapped back to the batch, then the subscriptions the host
    /// serves itself get every event ([`ReachIndex::serve_every`]).
    pub fn run(
        &self,
        batch: &[u8],
        view: Option<&View>,
        ask: impl FnOnce(&[u8], &Memberships) -> anyhow::Result<Matches>,
    ) -> anyhow::Result<Matches> {
        let (narrowed, memberships) = self.narrow(batch, view)?;
        let mut matches = match narrowed {
            Narrowed::Whole => ask(batch, &memberships)?,
            Narrowed::Nothing => Matches::default(),
            Narrowed::Subset { bytes, indices } => {
                let mut matches = ask(&bytes, &memberships)?;
                widen(&mut matches, &indices);
                matches
            }
        };
        self.serve_every(batch, &mut matches)?;
        Ok(matches)
    }
}

/// The key tests worth making on one batch's records: only the fields
/// some subscription named a key of (most indexes are empty), so a record
/// costs a lookup or two.
struct Probe<'a> {
    fields: KeyFields,
    senders: Option<&'a Counts<[u8; 20]>>,
    receivers: Option<&'a Counts<[u8; 20]>>,
    selectors: Option<&'a Counts<[u8; 4]>>,
    emitters: Option<&'a Counts<[u8; 20]>>,
    /// (position, keys) of the topic positions named.
    topics: Vec<(usize, &'a Counts<[u8; 32]>)>,
}

impl<'a> Probe<'a> {
    fn of(index: &'a ReachIndex, fields: KeyFields) -> Self {
        fn named<K>(counts: &Counts<K>) -> Option<&Counts<K>> {
            (!counts.is_empty()).then_some(counts)
        }
        Self {
            fields,
            senders: named(&index.senders),
            receivers: named(&index.receivers),
            selectors: named(&index.selectors),
            emitters: named(&index.emitters),
            topics: (0..4)
                .filter_map(|i| named(&index.topics[i]).map(|counts| (i, counts)))
                .collect(),
        }
    }

    /// Whether some subscription's keys name a value `record` carries.
    #[inline]
    fn concerns(&self, record: &[u8]) -> bool {
        fn hit<'r, K: std::hash::Hash + Eq + 'r>(
            counts: Option<&Counts<K>>,
            value: impl FnOnce() -> Option<&'r K>,
        ) -> bool {
            counts.is_some_and(|counts| value().is_some_and(|v| counts.contains_key(v)))
        }
        let f = &self.fields;
        hit(self.senders, || f.sender(record))
            || hit(self.receivers, || f.receiver(record))
            || hit(self.selectors, || f.selector(record))
            || hit(self.emitters, || f.emitter(record))
            || self
                .topics
                .iter()
                .any(|&(i, counts)| f.topic(record, i).is_some_and(|t| counts.contains_key(t)))
    }
}

/// The address a topic holds: its low 20 bytes, when the high 12 are zero.
fn padded_address(topic: &[u8; 32]) -> Option<[u8; 20]> {
    let (high, low) = topic.split_at(12);
    high.iter().all(|&b| b == 0).then(|| {
        let mut address = [0u8; 20];
        address.copy_from_slice(low);
        address
    })
}

/// Maps the component's answer about a subset back to the batch's event
/// indexes; one outside the subset stays outside the batch (a bad answer
/// the actor reports).
fn widen(matches: &mut Matches, indices: &[u32]) {
    for event in &mut matches.events {
        *event = indices.get(*event as usize).copied().unwrap_or(u32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use chainsieve_filter_core::Payload;
    use chainsieve_filter_core::layout::{LogFields, TxFields};
    use chainsieve_filter_core::projection::{ProjectedWriter, log_fields, tx_fields};

    use super::*;

    const TX: u32 = tx_fields::FROM | tx_fields::TO | tx_fields::SELECTOR;
    const KIND: Delivery = Delivery::Kind(Payload::Full);

    fn index(source: Source, fields: u32) -> ReachIndex {
        ReachIndex::new(source, Layout::Projected(fields))
    }

    /// A test transaction: sender, receiver (`None`: a creation), input.
    type Tx<'a> = ([u8; 20], Option<[u8; 20]>, &'a [u8]);

    /// Transactions in layout 2 with `TX`.
    fn transactions(txs: &[Tx<'_>]) -> Vec<u8> {
        let mut w = ProjectedWriter::new(Source::PendingTransactions, TX, txs.len());
        for (from, to, input) in txs {
            w.push_tx(&TxFields::call(from, to.as_ref(), input));
        }
        w.finish()
    }

    const A: [u8; 20] = [0xaa; 20];
    const B: [u8; 20] = [0xbb; 20];
    const C: [u8; 20] = [0xcc; 20];
    const TRANSFER: [u8; 4] = [0xa9, 0x05, 0x9c, 0xbb];

    fn subset_indices(narrowed: Narrowed) -> Vec<u32> {
        match narrowed {
            Narrowed::Subset { indices, .. } => indices,
            other => panic!("expected a subset, got {other:?}"),
        }
    }

    /// A watched key reaches the events whose field holds an address of
    /// the watchlist as of the batch's view, and the component is told
    /// which event's field hit which watchlist (its events numbered in the
    /// part it is asked about); a view before the edit sees the set before.
    #[test]
    fn watched_keys_reach_the_watchlists_addresses_as_of_the_view() {
        use std::sync::{Arc, RwLock};

        use chainsieve_watchlists::Index;
        use chainsieve_watchlists::views::Views;

        let lists = Arc::new(RwLock::new(Index::default()));
        lists.write().expect("index").apply(1, 7, &[A], &[]);
        lists.write().expect("index").apply(2, 8, &[C], &[]);
        let views = Arc::new(Views::new(lists));
        let mut reach = index(Source::PendingTransactions, TX);
        let watched = |field, list| Reach::Keys(vec![Key::Watched(field, list)]);
        reach
            .insert(1, watched(WatchedField::Sender, 7), KIND)
            .expect("sender in 7");
        reach
            .insert(2, watched(WatchedField::Receiver, 8), KIND)
            .expect("receiver in 8");
        let batch = transactions(&[
            (B, Some(B), &[]),
            (A, Some(B), &[]),
            (B, Some(C), &[]),
            (C, Some(A), &[]),
        ]);
        let (narrowed, memberships) = reach.narrow(&batch, Some(&views.view(2))).expect("narrows");
        assert_eq!(subset_indices(narrowed), [1, 2]);
        assert_eq!(
            memberships.entries(),
            &[(0, WatchedField::Sender, 7), (1, WatchedField::Receiver, 8)],
            "C's sending is in no watchlist a sender key names"
        );
        let (before, none) = reach.narrow(&batch, Some(&views.view(1))).expect("narrows");
        assert_eq!(subset_indices(before), [1], "C joined 8 at edit 2");
        assert_eq!(none.entries(), &[(0, WatchedField::Sender, 7)]);
        let (without, _) = reach.narrow(&batch, None).expect("narrows");
        assert_eq!(without, Narrowed::Nothing, "no view: no watchlist address");
    }

    /// A topic holding an address in its low 20 bytes is looked up; one
    /// whose high 12 bytes are not zero is no address.
    #[test]
    fn a_topic_is_looked_up_as_a_padded_address() {
        let mut padded = [0u8; 32];
        padded[12..].copy_from_slice(&A);
        assert_eq!(padded_address(&padded), Some(A));
        padded[0] = 1;
        assert_eq!(padded_address(&padded), None);
    }

    /// Only events carrying a key some subscription named are asked about,
    /// in a batch of their own that reads as those events.
    #[test]
    fn a_batch_narrows_to_the_events_keys_concern() {
        let mut reach = index(Source::PendingTransactions, TX);
        reach
            .insert(1, Reach::Keys(vec![Key::Sender(A)]), KIND)
            .expect("usable");
        reach
            .insert(2, Reach::Keys(vec![Key::Receiver(B)]), KIND)
            .expect("usable");
        reach
            .insert(3, Reach::Keys(vec![Key::Selector(TRANSFER)]), KIND)
            .expect("usable");
        let batch = transactions(&[
            (C, Some(C), b""),        // nobody's
            (A, Some(C), b""),        // 1's sender
            (C, None, b""),           // a creation: no receiver
            (C, Some(B), b""),        // 2's receiver
            (C, Some(C), &TRANSFER),  // 3's method
            (C, Some(C), &[0xa9, 5]), // too short for a selector
        ]);
        let Narrowed::Subset { bytes, indices } =
            reach.narrow(&batch, None).map(|n| n.0).expect("narrows")
        else {
            panic!("a subset");
        };
        assert_eq!(indices, [1, 3, 4]);
        let records = Records::parse(&bytes).expect("a batch");
        let fields = KeyFields::of(&records);
        let senders: Vec<_> = records
            .iter()
            .map(|r| *fields.sender(r).expect("from"))
            .collect();
        assert_eq!(senders, [A, C, C]);
        // Forgotten subscriptions no longer concern anything.
        reach.remove(1);
        reach.remove(3);
        assert_eq!(
            subset_indices(reach.narrow(&batch, None).map(|n| n.0).expect("narrows")),
            [3]
        );
        reach.remove(2);
        assert_eq!(
            reach.narrow(&batch, None).map(|n| n.0).expect("narrows"),
            Narrowed::Nothing
        );
    }

    /// A subscription that reaches any event sends the whole batch, and so
    /// does a batch every event of which some key concerns.
    #[test]
    fn any_reach_or_every_event_concerned_asks_about_all() {
        let mut reach = index(Source::PendingTransactions, TX);
        reach
            .insert(1, Reach::Keys(vec![Key::Sender(A)]), KIND)
            .expect("usable");
        let batch = transactions(&[(A, None, b""), (A, Some(B), b"")]);
        assert_eq!(
            reach.narrow(&batch, None).map(|n| n.0).expect("narrows"),
            Narrowed::Whole
        );
        reach.insert(2, Reach::Any, KIND).expect("usable");
        let other = transactions(&[(C, None, b"")]);
        assert_eq!(
            reach.narrow(&other, None).map(|n| n.0).expect("narrows"),
            Narrowed::Whole
        );
        // Re-subscribed with keys, 2 no longer needs every event.
        reach
            .insert(2, Reach::Keys(vec![Key::Sender(B)]), KIND)
            .expect("usable");
        assert_eq!(
            reach.narrow(&other, None).map(|n| n.0).expect("narrows"),
            Narrowed::Nothing
        );
        // A 0.1 component is always asked about everything.
        let whole = ReachIndex::new(Source::PendingTransactions, Layout::Whole);
        assert_eq!(
            whole.narrow(&[], None).map(|n| n.0).expect("no read"),
            Narrowed::Whole
        );
    }

    /// Logs narrow by emitter and by topic at its position only.
    #[test]
    fn logs_narrow_by_emitter_and_positioned_topic() {
        let fields = log_fields::ADDRESS | log_fields::TOPICS;
        let mut reach = index(Source::Logs, fields);
        reach
            .insert(1, Reach::Keys(vec![Key::Emitter(A)]), KIND)
            .expect("usable");
        reach
            .insert(2, Reach::Keys(vec![Key::Topic(1, [7; 32])]), KIND)
            .expect("usable");
        let logs: [([u8; 20], &[[u8; 32]]); 4] = [
            (A, &[]),                 // 1's contract
            (B, &[[7; 32]]),          // 7 at position 0: not 2's
            (B, &[[0; 32], [7; 32]]), // 7 at position 1
            (C, &[[0; 32]]),
        ];
        let mut w = ProjectedWriter::new(Source::Logs, fields, logs.len());
        for (address, topics) in &logs {
            w.push_log(&LogFields::emitted(address, topics));
        }
        let batch = w.finish();
        assert_eq!(
            subset_indices(reach.narrow(&batch, None).map(|n| n.0).expect("narrows")),
            [0, 2]
        );
    }

    /// The host serves `every` itself, and answers about a subset map back
    /// to the batch (an index outside the subset stays outside).
    #[test]
    fn every_is_served_and_subset_answers_widen() {
        let mut reach = index(Source::PendingTransactions, TX);
        reach.insert(5, Reach::Every, KIND).expect("usable");
        reach.insert(6, Reach::Every, KIND).expect("usable");
        reach.insert(5, Reach::Every, KIND).expect("usable");
        let mut matches = Matches::default();
        matches.push(0, 1);
        matches.push(1, 2);
        matches.push(2, 3);
        widen(&mut matches, &[4, 9]);
        assert_eq!(matches.events, [4, 9, u32::MAX]);
        let batch = transactions(&[(A, None, b""), (B, None, b"")]);
        let served = |reach: &ReachIndex| {
            let mut served = Matches::default();
            reach.serve_every(&batch, &mut served).expect("a batch");
            served.pairs().collect::<Vec<_>>()
        };
        // Subscribed again, 5 is served after 6.
        assert_eq!(served(&reach), [(0, 6), (1, 6), (0, 5), (1, 5)]);
        assert_eq!(
            reach.narrow(&batch, None).map(|n| n.0).expect("narrows"),
            Narrowed::Nothing
        );
        // What a component answered for them anyway is replaced.
        let mut answered = Matches::default();
        answered.push(1, 6);
        answered.push(1, 7);
        reach.serve_every(&batch, &mut answered).expect("a batch");
        assert_eq!(
            answered.pairs().collect::<Vec<_>>(),
            [(1, 7), (0, 6), (1, 6), (0, 5), (1, 5)]
        );
        reach.remove(5);
        assert_eq!(served(&reach), [(0, 6), (1, 6)]);
    }

    /// Each reach the host cannot use is named, and leaves the
    /// subscription's earlier reach forgotten.
    #[test]
    fn unusable_reaches_are_refused() {
        let mut reach = index(Source::Logs, log_fields::ADDRESS);
        let mut refused =
            |r: Reach, d: Delivery| reach.insert(1, r, d).expect_err("refused").to_string();
        assert!(refused(Reach::Every, Delivery::Written).contains("writes the payloads"));
        assert!(refused(Reach::Keys(vec![Key::Sender(A)]), KIND).contains("does not declare"));
        assert!(
            refused(Reach::Keys(vec![Key::Topic(0, [0; 32])]), KIND).contains("does not declare")
        );
        let mut topics = index(Source::Logs, log_fields::TOPICS);
        let beyond = topics.insert(1, Reach::Keys(vec![Key::Topic(4, [0; 32])]), KIND);
        assert!(beyond.expect_err("refused").to_string().contains("topic 4"));
        let mut v0_1 = ReachIndex::new(Source::Logs, Layout::Whole);
        assert!(
            v0_1.insert(1, Reach::Keys(vec![Key::Emitter(A)]), KIND)
                .is_err()
        );
        // Usable: an emitter key for written payloads, then `every`.
        reach
            .insert(1, Reach::Keys(vec![Key::Emitter(A)]), Delivery::Written)
            .expect("usable");
        reach.insert(1, Reach::Every, KIND).expect("usable");
        // One log: while 1 reaches every event it is served that log.
        let mut w = ProjectedWriter::new(Source::Logs, log_fields::ADDRESS, 1);
        w.push_log(&LogFields::emitted(&A, &[]));
        let batch = w.finish();
        let served = |reach: &ReachIndex| {
            let mut served = Matches::default();
            reach.serve_every(&batch, &mut served).expect("a batch");
            (served.events, served.subscriptions)
        };
        assert_eq!(served(&reach), (vec![0], vec![1]));
        // Refused again: nothing of 1 is left.
        assert!(reach.insert(1, Reach::Every, Delivery::Written).is_err());
        assert_eq!(served(&reach), (vec![], vec![]));
    }
}
