//! The subscriptions of a rule-per-subscription filter, filed so an event
//! meets only those it may concern: by the addresses a rule names (a
//! token, a contract) and, for rules naming none, all of them. Shared by
//! the SDKs' `Rules` (every contract version), so the cost per event stays
//! flat as subscriptions grow whatever the version.

use crate::{KeyMap, SubscriptionId, SubscriptionIndex};

/// Rules by subscription, filed by the addresses each is limited to.
#[derive(Debug)]
pub struct RuleSet<R> {
    rules: KeyMap<SubscriptionId, R>,
    by_key: SubscriptionIndex<[u8; 20]>,
    /// Subscriptions without an index: they see every event.
    unindexed: Vec<SubscriptionId>,
}

impl<R> Default for RuleSet<R> {
    fn default() -> Self {
        Self {
            rules: KeyMap::default(),
            by_key: SubscriptionIndex::default(),
            unindexed: Vec::new(),
        }
    }
}

impl<R> RuleSet<R> {
    /// Files `rule` as subscription `id` (replacing one of the same id),
    /// under the addresses `index` says it is limited to, if any.
    pub fn insert(
        &mut self,
        id: SubscriptionId,
        rule: R,
        index: impl Fn(&R) -> Option<&[[u8; 20]]>,
    ) {
        self.remove(id, &index);
        match index(&rule) {
            Some(keys) => keys.iter().for_each(|key| self.by_key.insert(*key, id)),
            None => self.unindexed.push(id),
        }
        self.rules.insert(id, rule);
    }

    /// Forgets subscription `id`; unknown ids are ignored.
    pub fn remove(&mut self, id: SubscriptionId, index: impl Fn(&R) -> Option<&[[u8; 20]]>) {
        let Some(rule) = self.rules.remove(&id) else {
            return;
        };
        match index(&rule) {
            Some(keys) => keys.iter().for_each(|key| self.by_key.remove(key, id)),
            None => self.unindexed.retain(|&other| other != id),
        }
    }

    /// Subscription `id`'s rule, if it has one.
    pub fn get(&self, id: SubscriptionId) -> Option<&R> {
        self.rules.get(&id)
    }

    /// The subscriptions an event filed under `key` may go to, with their
    /// rules: those limited to `key`, then those limited to nothing.
    pub fn candidates(
        &self,
        key: Option<[u8; 20]>,
    ) -> impl Iterator<Item = (SubscriptionId, &R)> + '_ {
        let indexed = match key {
            Some(key) => self.by_key.get(&key),
            None => &[],
        };
        indexed
            .iter()
            .chain(&self.unindexed)
            .filter_map(|id| self.rules.get(id).map(|rule| (*id, rule)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rule limited to some addresses, or (`None`) to none.
    type Limited = Option<Vec<[u8; 20]>>;

    fn index(rule: &Limited) -> Option<&[[u8; 20]]> {
        rule.as_deref()
    }

    #[test]
    fn an_event_meets_its_addresses_and_the_unlimited() {
        let mut set = RuleSet::<Limited>::default();
        set.insert(1, Some(vec![[1; 20]]), index);
        set.insert(2, None, index);
        set.insert(3, Some(vec![[3; 20], [1; 20]]), index);
        let ids = |key| set.candidates(key).map(|(id, _)| id).collect::<Vec<_>>();
        assert_eq!(ids(Some([1; 20])), [1, 3, 2]);
        assert_eq!(ids(Some([9; 20])), [2]);
        assert_eq!(ids(None), [2]);
        // Made again under other addresses; removed for good.
        set.insert(1, Some(vec![[9; 20]]), index);
        set.remove(3, index);
        let ids = |key| set.candidates(key).map(|(id, _)| id).collect::<Vec<_>>();
        assert_eq!(ids(Some([1; 20])), [2]);
        assert_eq!(ids(Some([9; 20])), [1, 2]);
    }
}
