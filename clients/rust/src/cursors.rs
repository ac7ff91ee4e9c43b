//! Where an application keeps its subscriptions' cursors so that it
//! resumes after its own restart, not only after a dropped socket.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

/// Cursors by subscription key.
///
/// `save` is called with each notification's cursor as the connector hands
/// it to alloy (which queues it in the subscription's channel for the
/// application: a restarted application resumes after the last one handed,
/// maybe a few past the last it handled); `load` once, when a subscription
/// of that key is made. An application that must not see an event twice
/// across its own restarts saves the cursor with the effects of handling
/// the event, and gives a store whose `save` does nothing and whose `load`
/// reads it back. Both are called on the connection's task: keep them
/// quick.
pub trait CursorStore: Send + Sync + 'static {
    /// The cursor saved for `key`, if any.
    fn load(&self, key: &str) -> Option<String>;
    /// Keeps `cursor` as the last of `key`.
    fn save(&self, key: &str, cursor: &str);
}

/// Cursors in memory, for tests and for a store to wrap.
#[derive(Debug, Default)]
pub struct MemoryCursorStore {
    cursors: Mutex<HashMap<String, String>>,
}

impl MemoryCursorStore {
    /// Every key's cursor, as kept now.
    pub fn cursors(&self) -> HashMap<String, String> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // A panic under this lock leaves a map, not a broken invariant.
        self.cursors.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl CursorStore for MemoryCursorStore {
    fn load(&self, key: &str) -> Option<String> {
        self.lock().get(key).cloned()
    }

    fn save(&self, key: &str, cursor: &str) {
        self.lock().insert(key.to_string(), cursor.to_string());
    }
}

/// A subscription's key: its topic, filter and finality, as compact JSON
/// (the JavaScript and Python packages' keys). Two subscriptions with the
/// same parameters share a key.
pub fn subscription_key(params: &[Value], finality: Option<&Value>) -> String {
    let mut key = params.to_vec();
    if let Some(finality) = finality {
        key.push(serde_json::json!({ "finality": finality }));
    }
    Value::Array(key).to_string()
}

/// The block a cursor names (`<chain>:<position>@<block>:<index>:<tag>`),
/// if it names one.
pub fn cursor_block(cursor: &str) -> Option<u64> {
    let parts: Vec<&str> = cursor.split(':').collect();
    let place = parts.len().checked_sub(3).map(|i| parts[i])?;
    let (_, block) = place.split_once('@')?;
    block.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_the_other_packages_keys() {
        let params = [json!("logs"), json!({"address": "0xab"})];
        assert_eq!(
            subscription_key(&params, None),
            r#"["logs",{"address":"0xab"}]"#
        );
        assert_eq!(
            subscription_key(&params[..1], Some(&json!("safe"))),
            r#"["logs",{"finality":"safe"}]"#
        );
    }

    #[test]
    fn a_cursor_names_its_block_when_it_has_one() {
        assert_eq!(cursor_block("eth:41@17:3:ab12"), Some(17));
        assert_eq!(cursor_block("eth:41:3:ab12"), None);
        assert_eq!(cursor_block("nonsense"), None);
    }

    #[test]
    fn the_memory_store_keeps_the_last_cursor_of_each_key() {
        let store = MemoryCursorStore::default();
        assert_eq!(store.load("a"), None);
        store.save("a", "eth:1@1:0:x");
        store.save("a", "eth:2@1:1:x");
        assert_eq!(store.load("a").as_deref(), Some("eth:2@1:1:x"));
    }
}
