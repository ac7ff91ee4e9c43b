//! Which watchlists every watched address is in, for matching: one map
//! from address to its watchlists for the whole server, so looking up an
//! event's address costs one hash probe whatever the number and size of
//! the watchlists (docs/src/watchlists.md, How matching scales).
//!
//! An edit changes the map at once, but each reader — a filter actor,
//! which meets the edit's point in its own chain's stream later than the
//! edit is made — must go on seeing the set as it was until then. So the
//! index keeps, beside the latest memberships, the flips (an address
//! joining or leaving a watchlist) that some reader has not yet passed,
//! each with its edit's sequence number, and answers a lookup as of the
//! reader's view. Once every reader has passed an edit, [`Index::settle`]
//! forgets its flips: most of the time there are none.

use std::collections::VecDeque;

use chainsieve_filter_core::KeyMap;

/// A 20-byte address, as the events carry it.
pub type Address = [u8; 20];

/// A watchlist's number: what subscriptions and the index name it by.
/// Below [`Handle::MAX`]: the index packs a handle in 31 bits.
pub type Handle = u32;

/// An edit's place in the order of every edit this server (or bus) has
/// applied, counted from 1; 0 is "before any edit".
pub type Seq = u64;

/// Set in a [`Slot`] whose address is in several watchlists.
const MANY: u32 = 1 << 31;

/// What the index holds per address: its one watchlist's handle, or (with
/// [`MANY`]) where in [`Index::many`] its watchlists are listed. Four
/// bytes, so an entry of the map is 24: a watched address costs at most
/// ~57 bytes of memory, at the map's fullest growth step
/// (docs/src/benchmarks.md, Watchlists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot(u32);

/// A change of one address's membership of one watchlist that some reader
/// has not passed yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Flip {
    handle: Handle,
    seq: Seq,
    /// Whether the address is in the watchlist after the edit.
    joined: bool,
}

/// Every watched address's watchlists, as of the latest edit and of every
/// view some reader still holds.
#[derive(Debug, Default)]
pub struct Index {
    latest: KeyMap<Address, Slot>,
    /// The watchlists of addresses in more than one, by slot; freed slots
    /// are reused.
    many: Vec<Vec<Handle>>,
    free: Vec<u32>,
    /// Flips that a reader's view may still be before, by address, in
    /// edit order.
    flips: KeyMap<Address, Vec<Flip>>,
    /// The same flips' addresses in edit order, to forget them.
    flip_order: VecDeque<(Seq, Address)>,
    /// The last edit applied.
    seq: Seq,
}

impl Index {
    /// The sequence number of the last edit applied.
    pub fn seq(&self) -> Seq {
        self.seq
    }

    /// How many addresses are in at least one watchlist.
    pub fn addresses(&self) -> usize {
        self.latest.len()
    }

    /// Loads `address` into `handle` at start, before any reader: no flip
    /// is kept. Loading an address twice into one watchlist is harmless.
    pub fn load(&mut self, handle: Handle, address: Address) {
        self.join(handle, address);
    }

    /// Marks where loading ended: the store's last edit.
    pub fn loaded(&mut self, seq: Seq) {
        self.seq = seq;
    }

    /// Applies edit `seq` to `handle`: `joined` addresses join it, `left`
    /// ones leave it. Addresses already in (or not in) it are no change;
    /// an address in both lists joins. Answers how many addresses joined
    /// and how many left. `seq` must follow the last edit's.
    pub fn apply(
        &mut self,
        seq: Seq,
        handle: Handle,
        joined: &[Address],
        left: &[Address],
    ) -> (usize, usize) {
        debug_assert!(seq > self.seq, "edit {seq} after edit {}", self.seq);
        debug_assert!(handle < MANY, "handle {handle} past 31 bits");
        self.seq = seq;
        let flipped = |index: &mut Self, address: Address, joined: bool| {
            index.flips.entry(address).or_default().push(Flip {
                handle,
                seq,
                joined,
            });
            index.flip_order.push_back((seq, address));
        };
        let mut counts = (0, 0);
        for &address in left {
            if !joined.contains(&address) && self.leave(handle, address) {
                flipped(self, address, false);
                counts.1 += 1;
            }
        }
        for &address in joined {
            if self.join(handle, address) {
                flipped(self, address, true);
                counts.0 += 1;
            }
        }
        counts
    }

    /// Calls `each` with every watchlist `address` is in as of `view` (an
    /// edit's sequence number: the set after that edit and before the
    /// next).
    #[inline]
    pub fn lists_of(&self, address: &Address, view: Seq, mut each: impl FnMut(Handle)) {
        let flips = if self.flips.is_empty() {
            None
        } else {
            self.flips.get(address)
        };
        let Some(flips) = flips.filter(|flips| flips.iter().any(|f| f.seq > view)) else {
            // No flip after the view: the latest memberships are the view's.
            self.each_latest(address, &mut each);
            return;
        };
        // Whether `handle` was in the watchlist as of `view`: before its
        // first flip after the view, the opposite of what that flip made.
        let at_view = |handle: Handle, now: bool| {
            flips
                .iter()
                .find(|f| f.handle == handle && f.seq > view)
                .map_or(now, |f| !f.joined)
        };
        self.each_latest(address, &mut |handle| {
            if at_view(handle, true) {
                each(handle);
            }
        });
        // Those it has left since the view, once each.
        for (i, flip) in flips.iter().enumerate() {
            let first = flips[..i].iter().all(|f| f.handle != flip.handle);
            if first && !self.contains_latest(address, flip.handle) && at_view(flip.handle, false) {
                each(flip.handle);
            }
        }
    }

    /// Whether `address` is in `handle` as of `view`.
    pub fn contains(&self, handle: Handle, address: &Address, view: Seq) -> bool {
        let mut found = false;
        self.lists_of(address, view, |h| found |= h == handle);
        found
    }

    /// Every address in `handle` as of `view`, in no order: a walk over
    /// every watched address, for the rare calls that need a whole
    /// watchlist (emptying it, listing it, a snapshot).
    pub fn members_of(&self, handle: Handle, view: Seq) -> Vec<Address> {
        let flipped = self.flips.keys().filter(|a| !self.latest.contains_key(*a));
        self.latest
            .keys()
            .chain(flipped)
            .filter(|address| self.contains(handle, address, view))
            .copied()
            .collect()
    }

    /// Every watchlist's addresses as of the latest edit.
    pub fn by_handle(&self) -> KeyMap<Handle, Vec<Address>> {
        let mut lists: KeyMap<Handle, Vec<Address>> = KeyMap::default();
        for address in self.latest.keys() {
            self.each_latest(address, &mut |handle| {
                lists.entry(handle).or_default().push(*address)
            });
        }
        lists
    }

    /// Forgets the flips of edits up to `seen_by_all`, which every reader
    /// has passed.
    pub fn settle(&mut self, seen_by_all: Seq) {
        while let Some(&(seq, address)) = self.flip_order.front() {
            if seq > seen_by_all {
                break;
            }
            self.flip_order.pop_front();
            if let Some(flips) = self.flips.get_mut(&address) {
                flips.retain(|f| f.seq > seen_by_all);
                if flips.is_empty() {
                    self.flips.remove(&address);
                }
            }
        }
    }

    /// How many flips wait for a reader to pass them.
    pub fn unsettled(&self) -> usize {
        self.flip_order.len()
    }

    fn each_latest(&self, address: &Address, each: &mut impl FnMut(Handle)) {
        match self.latest.get(address) {
            None => {}
            Some(&Slot(handle)) if handle & MANY == 0 => each(handle),
            Some(&Slot(slot)) => self.many[(slot & !MANY) as usize]
                .iter()
                .for_each(|&h| each(h)),
        }
    }

    fn contains_latest(&self, address: &Address, handle: Handle) -> bool {
        let mut found = false;
        self.each_latest(address, &mut |h| found |= h == handle);
        found
    }

    /// Adds `handle` to `address`'s watchlists; whether it was not there.
    fn join(&mut self, handle: Handle, address: Address) -> bool {
        let Some(slot) = self.latest.get_mut(&address) else {
            self.latest.insert(address, Slot(handle));
            return true;
        };
        if slot.0 & MANY == 0 {
            if slot.0 == handle {
                return false;
            }
            let lists = vec![slot.0, handle];
            let at = match self.free.pop() {
                Some(at) => {
                    self.many[at as usize] = lists;
                    at
                }
                None => {
                    self.many.push(lists);
                    (self.many.len() - 1) as u32
                }
            };
            *slot = Slot(at | MANY);
            return true;
        }
        let lists = &mut self.many[(slot.0 & !MANY) as usize];
        if lists.contains(&handle) {
            return false;
        }
        lists.push(handle);
        true
    }

    /// Removes `handle` from `address`'s watchlists; whether it was there.
    fn leave(&mut self, handle: Handle, address: Address) -> bool {
        let Some(slot) = self.latest.get_mut(&address) else {
            return false;
        };
        if slot.0 & MANY == 0 {
            if slot.0 != handle {
                return false;
            }
            self.latest.remove(&address);
            return true;
        }
        let at = slot.0 & !MANY;
        let lists = &mut self.many[at as usize];
        let Some(place) = lists.iter().position(|&h| h == handle) else {
            return false;
        };
        lists.swap_remove(place);
        if let [only] = lists[..] {
            *slot = Slot(only);
            self.many[at as usize] = Vec::new();
            self.free.push(at);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(n: u32) -> Address {
        let mut a = [0u8; 20];
        a[16..].copy_from_slice(&n.to_be_bytes());
        a
    }

    fn lists(index: &Index, n: u32, view: Seq) -> Vec<Handle> {
        let mut found = Vec::new();
        index.lists_of(&address(n), view, |h| found.push(h));
        found.sort_unstable();
        found
    }

    /// An address in one watchlist, then in three, then in one again: the
    /// slot turns into a list and back, and the list's place is reused.
    #[test]
    fn memberships_grow_and_shrink() {
        let mut index = Index::default();
        index.apply(1, 7, &[address(1)], &[]);
        assert_eq!(lists(&index, 1, 1), vec![7]);
        index.apply(2, 8, &[address(1), address(2)], &[]);
        index.apply(3, 9, &[address(1)], &[]);
        assert_eq!(lists(&index, 1, 3), vec![7, 8, 9]);
        assert_eq!(lists(&index, 2, 3), vec![8]);
        index.apply(4, 7, &[], &[address(1)]);
        index.apply(5, 9, &[], &[address(1)]);
        assert_eq!(lists(&index, 1, 5), vec![8]);
        assert_eq!(index.free, vec![0]);
        index.apply(6, 9, &[address(2)], &[]);
        assert_eq!(lists(&index, 2, 6), vec![8, 9]);
        assert!(index.free.is_empty(), "the freed place was taken again");
        index.apply(7, 8, &[], &[address(1)]);
        assert_eq!(lists(&index, 1, 7), Vec::<Handle>::new());
        assert_eq!(index.addresses(), 1);
    }

    /// What an edit changes, and what it leaves alone, is counted.
    #[test]
    fn an_edit_counts_what_it_changed() {
        let mut index = Index::default();
        assert_eq!(
            index.apply(1, 1, &[address(1), address(2), address(1)], &[]),
            (2, 0)
        );
        assert_eq!(
            index.apply(2, 1, &[address(2), address(3)], &[address(9)]),
            (1, 0)
        );
        assert_eq!(
            index.apply(3, 1, &[address(4)], &[address(1), address(4)]),
            (1, 1)
        );
        assert!(
            index.contains(1, &address(4), 3),
            "an address both added and removed joins"
        );
        assert_eq!(index.seq(), 3);
    }

    /// A reader whose view is before an edit sees the set as it was,
    /// whatever happened since; once every reader has passed the edits,
    /// their flips are forgotten and every view sees the latest.
    #[test]
    fn a_view_sees_the_set_as_of_its_edit() {
        let mut index = Index::default();
        index.load(1, address(1));
        index.load(2, address(1));
        index.loaded(10);
        index.apply(11, 1, &[], &[address(1)]);
        index.apply(12, 3, &[address(1)], &[]);
        index.apply(13, 1, &[address(1)], &[]);
        index.apply(14, 2, &[], &[address(1)]);
        index.apply(15, 4, &[address(5)], &[]);
        assert_eq!(lists(&index, 1, 10), vec![1, 2]);
        assert_eq!(lists(&index, 1, 11), vec![2]);
        assert_eq!(lists(&index, 1, 12), vec![2, 3]);
        assert_eq!(lists(&index, 1, 13), vec![1, 2, 3]);
        assert_eq!(lists(&index, 1, 14), vec![1, 3]);
        assert_eq!(lists(&index, 5, 14), Vec::<Handle>::new());
        assert_eq!(lists(&index, 5, 15), vec![4]);
        assert!(!index.contains(3, &address(1), 11));
        assert!(index.contains(3, &address(1), 12));
        assert_eq!(index.unsettled(), 5);
        index.settle(12);
        assert_eq!(index.unsettled(), 3);
        assert_eq!(
            lists(&index, 1, 12),
            vec![2, 3],
            "a view at the settled edit"
        );
        assert_eq!(lists(&index, 1, 13), vec![1, 2, 3]);
        index.settle(15);
        assert_eq!(index.unsettled(), 0);
        assert!(index.flips.is_empty());
        assert_eq!(lists(&index, 1, 15), vec![1, 3]);
    }

    /// Random edits against a model that keeps every version: every view
    /// still held answers what the model had at its edit.
    #[test]
    fn views_agree_with_every_version_kept() {
        use std::collections::BTreeSet;
        let mut index = Index::default();
        let mut versions: Vec<BTreeSet<(Handle, u32)>> = vec![BTreeSet::new()];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        let mut oldest_view = 0;
        for seq in 1..=400u64 {
            let handle = next(4) as Handle;
            let joined: Vec<u32> = (0..next(5)).map(|_| next(12) as u32).collect();
            let left: Vec<u32> = (0..next(5)).map(|_| next(12) as u32).collect();
            let mut model = versions.last().cloned().unwrap_or_default();
            for n in &left {
                if !joined.contains(n) {
                    model.remove(&(handle, *n));
                }
            }
            for n in &joined {
                model.insert((handle, *n));
            }
            versions.push(model);
            let addresses = |ns: &[u32]| ns.iter().map(|&n| address(n)).collect::<Vec<_>>();
            index.apply(seq, handle, &addresses(&joined), &addresses(&left));
            if next(10) == 0 {
                // Readers only move forward.
                oldest_view = oldest_view.max(seq.saturating_sub(next(20)));
                index.settle(oldest_view);
            }
            for view in oldest_view..=seq {
                for n in 0..12 {
                    let want: Vec<Handle> = versions[view as usize]
                        .iter()
                        .filter(|(_, a)| *a == n)
                        .map(|(h, _)| *h)
                        .collect();
                    assert_eq!(
                        lists(&index, n, view),
                        want,
                        "address {n} as of {view} (now {seq})"
                    );
                }
            }
        }
    }
}
