//! Every live subscription of the server by public id, so `eth_unsubscribe`
//! works from the connection that made it and, over HTTP, from any request
//! with the same API key (the BlockVision SDK unsubscribes that way).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use chainsieve_filters::FilterHandle;

/// The ids one connection owns (cancelled when it closes).
pub type OwnedIds = Mutex<HashSet<Arc<str>>>;

#[derive(Debug)]
struct Live {
    key: u64,
    api_key: Arc<str>,
    filter: FilterHandle,
    /// The connection that made it: a cancel from elsewhere (HTTP) takes
    /// the id out of its set too. Weak, as the connection may be gone.
    owner: Weak<OwnedIds>,
}

#[derive(Debug, Default)]
pub struct Subscriptions {
    /// Short critical sections only (insert/remove); never held across an
    /// await.
    live: Mutex<HashMap<Arc<str>, Live>>,
    next_key: AtomicU64,
}

impl Subscriptions {
    /// A key for a new subscription, unique in this process.
    pub fn next_key(&self) -> u64 {
        self.next_key.fetch_add(1, Ordering::Relaxed)
    }

    pub fn insert(
        &self,
        id: Arc<str>,
        key: u64,
        api_key: Arc<str>,
        filter: FilterHandle,
        owner: &Arc<OwnedIds>,
    ) {
        self.lock().insert(
            id,
            Live {
                key,
                api_key,
                filter,
                owner: Arc::downgrade(owner),
            },
        );
    }

    /// Cancels subscription `id` if `api_key` owns it. False if there is no
    /// such subscription for that key.
    pub async fn remove(&self, id: &str, api_key: &str) -> bool {
        let live = {
            let mut live = self.lock();
            match live.get(id) {
                Some(entry) if &*entry.api_key == api_key => live.remove(id),
                _ => None,
            }
        };
        match live {
            Some(Live {
                key, filter, owner, ..
            }) => {
                if let Some(owner) = owner.upgrade() {
                    owner
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .remove(id);
                }
                filter.unsubscribe(key).await;
                true
            }
            None => false,
        }
    }

    /// Takes `id` out of the table alone: for a subscription whose making
    /// is undone, which ends it at its actor itself.
    pub fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Live>> {
        self.live
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
