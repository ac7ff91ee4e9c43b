//! The built-in `newHeads` component: every canonical header goes to every
//! subscription, in geth's shape. It takes no parameters.

use chainsieve_filter_sdk::params::{self, ParamsError};
use chainsieve_filter_sdk::{
    Broadcast, Filter, HeadView, Manifest, Payload, Source, SubscriptionId, export_filter,
};

/// Every subscription receives every header; nothing to index.
#[derive(Debug, Default)]
pub struct NewHeads {
    subscriptions: Broadcast,
}

impl Filter for NewHeads {
    const MANIFEST: Manifest = Manifest {
        topic: "newHeads",
        source: Source::Heads,
        payload: Payload::Full,
    };
    type Event<'a> = HeadView<'a>;

    fn subscribe(&mut self, id: SubscriptionId, params: &str) -> Result<Payload, ParamsError> {
        let items = params::array(params)?;
        // Some clients send an empty object; geth ignores it too.
        let extra = items
            .iter()
            .filter(|v| !v.is_null() && v.as_object().is_none_or(|o| !o.is_empty()));
        if extra.count() > 0 {
            return Err(ParamsError::new("newHeads takes no parameters"));
        }
        self.subscriptions.insert(id);
        Ok(Payload::Full)
    }

    fn unsubscribe(&mut self, id: SubscriptionId) {
        self.subscriptions.remove(id);
    }

    fn matches(&self, _head: &HeadView<'_>, emit: &mut impl FnMut(SubscriptionId)) {
        self.subscriptions.emit_all(emit);
    }
}

export_filter!(NewHeads);

#[cfg(test)]
mod tests {
    use chainsieve_filter_sdk::layout::{BatchWriter, HeadFields};
    use chainsieve_filter_sdk::match_batch;

    use super::*;

    #[test]
    fn every_header_reaches_every_subscription() {
        let mut f = NewHeads::default();
        f.subscribe(1, "[]").expect("no params");
        f.subscribe(2, "[{}]").expect("empty object tolerated");
        assert!(f.subscribe(3, r#"[{"includeTransactions":true}]"#).is_err());
        let mut w = BatchWriter::new(Source::Heads, 2);
        for number in [10, 11] {
            w.push_head(&HeadFields {
                number,
                timestamp: 0,
                hash: &[0; 32],
                parent_hash: &[0; 32],
                miner: &[0; 20],
                gas_used: 0,
                gas_limit: 0,
                base_fee: 0,
            });
        }
        let m = match_batch(&f, &w.finish()).expect("heads batch");
        assert_eq!(
            m.pairs().collect::<Vec<_>>(),
            vec![(0, 1), (0, 2), (1, 1), (1, 2)]
        );
        f.unsubscribe(1);
        assert_eq!(f.subscriptions.ids(), [2]);
    }
}
