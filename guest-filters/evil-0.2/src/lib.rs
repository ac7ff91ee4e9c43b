//! **Tests only.** A contract 0.2 `newHeads` that writes its notifications'
//! payloads itself, and bad ones on request, to prove the host's checks of
//! written payloads and of reach, and a hot swap across contract versions
//! (it replaces the 0.1 build of `newHeads` in the tests' filters
//! directory). A subscription's parameters pick
//! what it gets:
//!
//! - `[]`: every head as `{"number": "0x…", "contract": "0.2"}`, one
//!   payload per head for all such subscriptions;
//! - `[{"write": "bad-json"}]`: a payload that is not JSON;
//! - `[{"write": "huge"}]`: a 100 KiB payload, over the default
//!   `filters.max_payload_bytes`;
//! - `[{"write": "none"}]`: a match without the payload it is owed;
//! - `[{"write": "claim-every"}]`: heads as for `[]`, but the subscription
//!   claims to reach every event, which the host serves itself only with a
//!   payload kind: a reach the host refuses.

use chainsieve_filter_sdk_0_2::params::{self, ParamsError};
use chainsieve_filter_sdk_0_2::{
    Delivery, Filter, HeadView, Manifest, Out, Reach, Source, SubscriptionId, export_filter,
};

/// What a subscription asked to be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    Head,
    BadJson,
    Huge,
    Nothing,
    ClaimEvery,
}

#[derive(Debug, Default)]
pub struct EvilHeads {
    subscriptions: Vec<(SubscriptionId, Write)>,
}

impl Filter for EvilHeads {
    const MANIFEST: Manifest = Manifest {
        topic: "newHeads",
        source: Source::Heads,
        delivery: Delivery::Written,
    };
    type Event<'a> = HeadView<'a>;

    fn subscribe(&mut self, id: SubscriptionId, params: &str) -> Result<Delivery, ParamsError> {
        let items = params::array(params)?;
        params::at_most(&items, 1, "newHeads")?;
        let write = match items.first().and_then(|item| item.get("write")) {
            None => Write::Head,
            Some(value) => match value.as_str() {
                Some("bad-json") => Write::BadJson,
                Some("huge") => Write::Huge,
                Some("none") => Write::Nothing,
                Some("claim-every") => Write::ClaimEvery,
                _ => return Err(ParamsError::new(format!("unknown write {value}"))),
            },
        };
        self.unsubscribe(id);
        self.subscriptions.push((id, write));
        Ok(Delivery::Written)
    }

    fn unsubscribe(&mut self, id: SubscriptionId) {
        self.subscriptions.retain(|(other, _)| *other != id);
    }

    fn reach(&self, id: SubscriptionId) -> Reach {
        match self.subscriptions.iter().find(|(other, _)| *other == id) {
            Some((_, Write::ClaimEvery)) => Reach::Every,
            _ => Reach::Any,
        }
    }

    fn matches(&self, head: &HeadView<'_>, out: &mut Out<'_>) {
        let mut shared = None;
        for &(id, write) in &self.subscriptions {
            match write {
                Write::Head | Write::ClaimEvery => {
                    let payload = *shared.get_or_insert_with(|| {
                        out.write(&format!(
                            r#"{{"number":"{:#x}","contract":"0.2"}}"#,
                            head.number()
                        ))
                    });
                    out.send_written(id, payload);
                }
                Write::BadJson => {
                    let payload = out.write(r#"{"number":"#);
                    out.send_written(id, payload);
                }
                Write::Huge => {
                    let payload = out.write(&format!("\"{}\"", "x".repeat(100 << 10)));
                    out.send_written(id, payload);
                }
                Write::Nothing => out.send(id),
            }
        }
    }
}

export_filter!(EvilHeads);

#[cfg(test)]
mod tests {
    use chainsieve_filter_sdk_0_2::layout::HeadFields;
    use chainsieve_filter_sdk_0_2::{ProjectedWriter, match_batch};

    use super::*;

    /// Subscriptions asking for heads share one payload per head; the
    /// others get what they asked for.
    #[test]
    fn each_subscription_gets_what_it_asked_for() {
        let mut filter = EvilHeads::default();
        for (id, params) in [(1, "[]"), (2, "[]"), (3, r#"[{"write":"none"}]"#)] {
            filter.subscribe(id, params).expect("accepted");
        }
        assert!(filter.subscribe(4, r#"[{"write":"?"}]"#).is_err());
        filter
            .subscribe(5, r#"[{"write":"claim-every"}]"#)
            .expect("accepted");
        assert_eq!(filter.reach(5), Reach::Every);
        assert_eq!(filter.reach(1), Reach::Any);
        filter.unsubscribe(5);
        let mut writer = ProjectedWriter::new(Source::Heads, 0, 1);
        writer.push_head(&HeadFields::numbered(16));
        let matches = match_batch(&filter, &writer.finish()).expect("a heads batch");
        assert_eq!(matches.subscriptions, [1, 2, 3]);
        assert_eq!(
            (0..3)
                .map(|pair| matches.payload_of(pair))
                .collect::<Vec<_>>(),
            [Some(0), Some(0), None]
        );
        assert_eq!(
            matches.written(0),
            Some(&br#"{"number":"0x10","contract":"0.2"}"#[..])
        );
    }
}
