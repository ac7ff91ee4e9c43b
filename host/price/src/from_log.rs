//! What a leading ingest's price index reads (docs/src/architecture.md, The
//! bus): first the log's steps it has not indexed yet, read from the
//! stream (an index that lagged, or a first leader on a stream of old),
//! then each step this term publishes, as the publisher hands it over.

use std::ops::ControlFlow;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use chainsieve_bus::linear::Reader;
use chainsieve_bus::{ChainLog, codec};
use chainsieve_eventlog::{Position, Step};

use crate::Feed;

/// Hands `index` the steps of `log` after `after` up to `head` (the
/// stream's last when the term began), then each step `published` brings
/// (what the publisher put on the bus, `chainsieve_bus::publish`), until
/// `term` ends or the index stops.
pub async fn feed_index(
    log: &ChainLog,
    after: Position,
    head: Position,
    mut published: mpsc::Receiver<Arc<Step>>,
    index: mpsc::Sender<Feed>,
    term: CancellationToken,
) {
    if after < head {
        tracing::info!(chain = %log.chain(), from = after + 1, to = head, "indexing prices from the log");
        let mut reader = IntoIndex {
            chain: log.chain(),
            expected: after + 1,
            head,
            index: &index,
        };
        match log.read(after + 1, &mut reader, &term).await {
            Ok(Some(())) => {}
            Ok(None) => return,
            Err(error) => {
                tracing::error!(chain = %log.chain(), error = format!("{error:#}"), "cannot index the log's steps");
                return;
            }
        }
    }
    loop {
        let step = tokio::select! {
            () = term.cancelled() => return,
            step = published.recv() => step,
        };
        let Some(step) = step else {
            return;
        };
        if let Some(feed) = Feed::of(step.position, &step.change)
            && index.send(feed).await.is_err()
        {
            return;
        }
    }
}

/// Hands each step read up to `head` to the index.
struct IntoIndex<'a> {
    chain: &'a str,
    /// The position the next step should have.
    expected: Position,
    head: Position,
    index: &'a mpsc::Sender<Feed>,
}

impl Reader for IntoIndex<'_> {
    async fn take(&mut self, run: Vec<(u64, Bytes)>) -> anyhow::Result<ControlFlow<()>> {
        for (position, payload) in run {
            if position > self.head {
                return Ok(ControlFlow::Break(()));
            }
            if position > self.expected {
                tracing::warn!(
                    chain = %self.chain, from = self.expected, to = position - 1,
                    "steps aged out of the stream before the price index read them; their blocks set no price"
                );
            }
            self.expected = position + 1;
            match codec::decode(&payload) {
                Ok(change) => {
                    if let Some(feed) = Feed::of(position, &change)
                        && self.index.send(feed).await.is_err()
                    {
                        return Ok(ControlFlow::Break(()));
                    }
                }
                Err(error) => {
                    tracing::error!(chain = %self.chain, position, %error, "the price index skips a step this server cannot read");
                }
            }
            if position == self.head {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}
