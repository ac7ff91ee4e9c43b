//! An answer's pairs as the actor delivers them, live or replayed: grouped
//! by subscriber, each one's events in chain order (which its cursors rely
//! on). Grouped, the frames one connection gets from a batch are queued
//! back to back, so its writer takes them in one wake and one write
//! instead of one per event (docs/src/architecture.md, Fan-out). An answer
//! about a single event (every pending batch of one transaction) is taken
//! as it is.
//!
//! A payload the component wrote becomes one [`Notice`] for every
//! subscriber it goes to: serialized once, however many share it.

use chainsieve_filter_core::Matches;

use crate::batch::EventBatch;
use chainsieve_fanout::Notice;

/// One event going to one subscription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    pub event: u32,
    pub key: u64,
    /// The notice of the payload the component wrote for it, if it wrote
    /// one; otherwise the subscription's payload kind applies.
    pub written: Option<Notice>,
}

/// The pairs of `matches` about `batch`, in delivery order, without those
/// naming an event outside the batch (returned apart, for the log). The
/// answer passed `contract::check_written` (in `FilterInstance::match_batch`).
pub fn delivery_order(matches: &Matches, batch: &EventBatch) -> (Vec<Pair>, Vec<u32>) {
    // Per written payload: the event its notice was made for, and the
    // notice (a payload named for another event gets that event's cursor).
    let mut notices: Vec<Option<(u32, Notice)>> = vec![None; matches.payload_ends.len()];
    let mut pairs = Vec::with_capacity(matches.len());
    let mut outside = Vec::new();
    for (index, (event, key)) in matches.pairs().enumerate() {
        if event as usize >= batch.len() {
            outside.push(event);
            continue;
        }
        let written = matches
            .payload_of(index)
            .map(|payload| notice(matches, batch, &mut notices, payload, event));
        pairs.push(Pair {
            event,
            key,
            written,
        });
    }
    let single_event = pairs
        .first()
        .is_none_or(|first| pairs.iter().all(|pair| pair.event == first.event));
    if !single_event {
        // Stable, so it merges the runs an answer comes in (a component's
        // event by event, each in subscriber order; the host's broadcast
        // subscriber by subscriber) instead of sorting every pair afresh.
        pairs.sort_by_key(|pair| (pair.key, pair.event));
    }
    (pairs, outside)
}

/// The notice of written payload `payload` for `event`, made once.
fn notice(
    matches: &Matches,
    batch: &EventBatch,
    notices: &mut [Option<(u32, Notice)>],
    payload: u32,
    event: u32,
) -> Notice {
    let slot = &mut notices[payload as usize];
    if let Some((made_for, notice)) = slot
        && *made_for == event
    {
        return notice.clone();
    }
    // `contract::check_written` found every payload in the payload bytes
    // and one JSON value (so UTF-8): the fallbacks are never taken.
    let bytes = matches.written(payload).unwrap_or_default();
    let notice = Notice::new(
        &String::from_utf8_lossy(bytes),
        batch.cursor(event as usize),
    );
    *slot = Some((event, notice.clone()));
    notice
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chainsieve_filter_core::Source;

    use super::*;
    use chainsieve_model::StreamEvent;
    use chainsieve_model::Transaction;

    /// A batch of `count` pending transactions.
    fn batch(count: u8) -> EventBatch {
        let events = (0..count)
            .map(|i| {
                StreamEvent::Pending(Arc::new(Transaction::fixture(
                    alloy_primitives::B256::repeat_byte(i),
                )))
            })
            .collect();
        EventBatch::new(Source::PendingTransactions, events)
    }

    fn order(matches: &Matches, batch: &EventBatch) -> Vec<(u32, u64)> {
        let (pairs, _) = delivery_order(matches, batch);
        pairs.iter().map(|pair| (pair.event, pair.key)).collect()
    }

    /// Each subscriber's events come together and in chain order, however
    /// the component ordered its answer; one event's answer is kept as is.
    #[test]
    fn matches_are_delivered_grouped_by_subscriber_in_chain_order() {
        let matches = Matches {
            events: vec![2, 0, 1, 0, 2, 1],
            subscriptions: vec![7, 9, 7, 7, 9, 9],
            ..Matches::default()
        };
        assert_eq!(
            order(&matches, &batch(3)),
            [(0, 7), (1, 7), (2, 7), (0, 9), (1, 9), (2, 9)]
        );
        let one_event = Matches {
            events: vec![2, 2, 2],
            subscriptions: vec![9, 7, 8],
            ..Matches::default()
        };
        assert_eq!(order(&one_event, &batch(3)), [(2, 9), (2, 7), (2, 8)]);
    }

    /// Subscribers sharing a written payload share its notice (one
    /// serialization); a pair naming none keeps the payload kind; a pair
    /// outside the batch is set apart.
    #[test]
    fn a_written_payload_is_one_notice_for_all_it_goes_to() {
        let mut matches = Matches::default();
        let transfer = matches.write_payload(br#"{"amount":"5"}"#);
        matches.push_written(1, 7, transfer);
        matches.push_written(1, 8, transfer);
        matches.push(0, 9);
        matches.push(4, 9);
        let batch = batch(2);
        let (pairs, outside) = delivery_order(&matches, &batch);
        assert_eq!(outside, [4]);
        let notices: Vec<_> = pairs.iter().map(|pair| pair.written.clone()).collect();
        let shared = notices[0].as_ref().expect("written");
        assert_eq!(shared.payload(), r#"{"amount":"5"}"#);
        assert_eq!(notices[1].as_ref(), Some(shared));
        assert_eq!(notices[2], None);
    }
}
