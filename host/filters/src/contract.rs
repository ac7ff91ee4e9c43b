//! What the host knows of a component whatever contract version it was
//! built for: its manifest, what its subscriptions receive, the batch
//! layout it reads, and the checks its written payloads pass (once each,
//! never per subscriber). Each version's bindings module translates into
//! these; nothing past `filters/` sees a version.

use std::collections::HashSet;
use std::sync::Arc;

pub use chainsieve_filter_core::Delivery;
use chainsieve_filter_core::{Matches, NO_PAYLOAD, Source};

use crate::batch::EventBatch;

/// What a component says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterManifest {
    pub topic: String,
    pub source: Source,
    /// What a subscription receives unless `subscribe` says otherwise.
    pub delivery: Delivery,
    /// The batches it reads.
    pub layout: Layout,
}

/// The batch layout a component reads (`wit/BATCH_LAYOUT.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Layout 1: every field (contract 0.1).
    Whole,
    /// Layout 2: only these fields (contract 0.2; bits as in
    /// `chainsieve_filter_core::projection`).
    Projected(u32),
}

impl Layout {
    /// `batch` as a component of this layout reads it, encoded once per
    /// layout and field set and kept with the batch.
    pub fn of(self, batch: &EventBatch) -> Arc<[u8]> {
        match self {
            Layout::Whole => batch.encoded(),
            Layout::Projected(fields) => batch.projected(fields),
        }
    }
}

/// Checks what a component wrote: every pair names a payload it wrote (or
/// none), every payload is one JSON value of at most `max_bytes`, and every
/// pair of a subscription in `writes_for` (those that answered
/// [`Delivery::Written`]) names one. `Err` says what was wrong: the whole
/// answer is then a bad one.
pub(super) fn check_written(
    matches: &Matches,
    max_bytes: usize,
    writes_for: &HashSet<u64>,
) -> anyhow::Result<()> {
    let written = matches.payload_ends.len();
    if !matches.payloads.is_empty() && matches.payloads.len() != matches.events.len() {
        anyhow::bail!(
            "the filter named payloads for {} of {} matches",
            matches.payloads.len(),
            matches.events.len()
        );
    }
    if let Some(index) = matches
        .payloads
        .iter()
        .find(|&&index| index != NO_PAYLOAD && index as usize >= written)
    {
        anyhow::bail!("a match names payload {index}, and the filter wrote {written}");
    }
    if matches.payload_ends.last().map_or(0, |&end| end as usize) != matches.payload_bytes.len() {
        anyhow::bail!("the filter's payload ends do not end where its payload bytes do");
    }
    for index in 0..written as u32 {
        let Some(bytes) = matches.written(index) else {
            anyhow::bail!("payload {index} lies outside the payload bytes");
        };
        if bytes.len() > max_bytes {
            anyhow::bail!(
                "payload {index} is {} bytes, over the limit of {max_bytes} (filters.max_payload_bytes)",
                bytes.len()
            );
        }
        serde_json::from_slice::<&serde_json::value::RawValue>(bytes)
            .map_err(|error| anyhow::anyhow!("payload {index} is not one JSON value: {error}"))?;
    }
    if !writes_for.is_empty()
        && (0..matches.len()).any(|pair| {
            matches.payload_of(pair).is_none() && writes_for.contains(&matches.subscriptions[pair])
        })
    {
        anyhow::bail!("the filter wrote no payload for a match of a subscription it writes for");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(payloads: &[&str]) -> Matches {
        let mut matches = Matches::default();
        for (event, payload) in payloads.iter().enumerate() {
            let index = matches.write_payload(payload.as_bytes());
            matches.push_written(event as u32, 1, index);
        }
        matches
    }

    #[test]
    fn json_payloads_within_the_limit_pass() {
        let matches = written(&[r#"{"amount":"1"}"#, "[1,2]", r#""text""#]);
        assert!(check_written(&matches, 64, &HashSet::new()).is_ok());
        assert!(check_written(&Matches::default(), 64, &HashSet::new()).is_ok());
    }

    /// Each way an answer can be bad is named.
    #[test]
    fn bad_payloads_are_named() {
        let message = |matches: &Matches| {
            check_written(matches, 16, &HashSet::new())
                .expect_err("a bad answer")
                .to_string()
        };
        assert!(message(&written(&[r#"{"amount":"#])).contains("not one JSON value"));
        assert!(message(&written(&["[1] [2]"])).contains("not one JSON value"));
        assert!(message(&written(&[r#"{"amount":"123456789"}"#])).contains("over the limit of 16"));
        let mut unwritten = written(&["1"]);
        unwritten.payloads[0] = 5;
        assert!(message(&unwritten).contains("names payload 5"));
        let mut short = written(&["1"]);
        short.push(1, 2);
        short.payloads.pop();
        assert!(message(&short).contains("payloads for 1 of 2"));
        let mut cut = written(&["1"]);
        cut.payload_bytes.push(b' ');
        assert!(message(&cut).contains("do not end where"));
        let mut backwards = written(&["1", "2"]);
        backwards.payload_ends = vec![2, 1];
        backwards.payload_bytes = b"1".to_vec();
        assert!(message(&backwards).contains("payload 0 lies outside"));
    }

    /// A subscription that gets written payloads, matched without one: the
    /// whole answer is bad; a subscription of a payload kind is not owed one.
    #[test]
    fn a_written_subscription_without_a_payload_is_a_bad_answer() {
        let mut matches = Matches::default();
        matches.push(0, 7);
        assert!(check_written(&matches, 64, &HashSet::from([8])).is_ok());
        let refused = check_written(&matches, 64, &HashSet::from([7])).expect_err("a bad answer");
        assert!(
            refused.to_string().contains("wrote no payload"),
            "{refused}"
        );
    }
}
