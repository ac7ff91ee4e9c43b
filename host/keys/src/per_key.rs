//! Places per API key, so one key cannot take everything the server has
//! of something: open WebSocket connections, history streams. A [`Place`]
//! is held for as long as what it counts lives and is given back when
//! dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
pub struct PerKey {
    /// Places taken by key; a key leaves the map at zero. Held only to
    /// count.
    open: Mutex<HashMap<Arc<str>, usize>>,
}

/// One place of a key; dropping it frees the place.
#[derive(Debug)]
pub struct Place {
    places: Arc<PerKey>,
    key: Arc<str>,
}

impl PerKey {
    /// A place for `key`, unless it already has `limit`.
    pub fn open(self: &Arc<Self>, key: &Arc<str>, limit: usize) -> Option<Place> {
        let mut open = self.lock();
        let count = open.entry(key.clone()).or_default();
        if *count >= limit {
            return None;
        }
        *count += 1;
        Some(Place {
            places: self.clone(),
            key: key.clone(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, usize>> {
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self.places.lock();
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gets_at_most_its_limit_and_places_come_back() {
        let connections = Arc::new(PerKey::default());
        let (alice, bob): (Arc<str>, Arc<str>) = ("alice".into(), "bob".into());
        let first = connections.open(&alice, 2).expect("room");
        let second = connections.open(&alice, 2).expect("room");
        assert!(connections.open(&alice, 2).is_none(), "limit reached");
        assert!(connections.open(&bob, 2).is_some(), "other keys unaffected");
        drop(first);
        assert_eq!(connections.lock().get("alice"), Some(&1));
        let third = connections.open(&alice, 2).expect("a place came back");
        drop((second, third));
        assert!(connections.lock().is_empty(), "no empty entries kept");
    }
}
