//! The built-in `newPendingTransactions` component (geth's semantics): every
//! pending transaction goes to every subscription, as its hash, or as the full
//! transaction (with `null` block fields) when subscribed with `true`.

use chainsieve_filter_sdk::params::{self, ParamsError};
use chainsieve_filter_sdk::{
    Broadcast, Filter, Manifest, Payload, Source, SubscriptionId, TxView, export_filter,
};

/// Every subscription receives every event; nothing to index.
#[derive(Debug, Default)]
pub struct NewPendingTransactions {
    subscriptions: Broadcast,
}

impl Filter for NewPendingTransactions {
    const MANIFEST: Manifest = Manifest {
        topic: "newPendingTransactions",
        source: Source::PendingTransactions,
        payload: Payload::Hash,
    };
    type Event<'a> = TxView<'a>;

    fn subscribe(&mut self, id: SubscriptionId, params: &str) -> Result<Payload, ParamsError> {
        let items = params::array(params)?;
        params::at_most(&items, 1, Self::MANIFEST.topic)?;
        let payload = match items.first() {
            None
            | Some(chainsieve_filter_sdk::serde_json::Value::Null)
            | Some(chainsieve_filter_sdk::serde_json::Value::Bool(false)) => Payload::Hash,
            Some(chainsieve_filter_sdk::serde_json::Value::Bool(true)) => Payload::Full,
            Some(other) => {
                return Err(ParamsError::new(format!(
                    "newPendingTransactions takes an optional boolean (full transactions), got {}",
                    params::kind(other)
                )));
            }
        };
        self.subscriptions.insert(id);
        Ok(payload)
    }

    fn unsubscribe(&mut self, id: SubscriptionId) {
        self.subscriptions.remove(id);
    }

    fn matches(&self, _tx: &TxView<'_>, emit: &mut impl FnMut(SubscriptionId)) {
        self.subscriptions.emit_all(emit);
    }
}

export_filter!(NewPendingTransactions);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_follows_the_boolean() {
        let mut f = NewPendingTransactions::default();
        assert_eq!(f.subscribe(1, "[]"), Ok(Payload::Hash));
        assert_eq!(f.subscribe(2, "[false]"), Ok(Payload::Hash));
        assert_eq!(f.subscribe(3, "[true]"), Ok(Payload::Full));
        let err = f.subscribe(4, r#"["yes"]"#).expect_err("not a boolean");
        assert!(err.to_string().contains("optional boolean"));
        assert!(f.subscribe(5, "[true, 1]").is_err());
        assert_eq!(f.subscriptions.ids(), [1, 2, 3]);
        f.unsubscribe(2);
        assert_eq!(f.subscriptions.ids(), [1, 3]);
    }
}
