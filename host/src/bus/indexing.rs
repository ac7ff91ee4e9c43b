//! What a leading ingest's price index reads (docs/src/architecture.md, The
//! bus): first the log's steps it has not indexed yet, read from the
//! stream (an index that lagged, or a first leader on a stream of old),
//! then each step this term publishes, as the publisher hands it over.

use std::ops::ControlFlow;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::linear::Reader;
use super::{ChainLog, codec};
use chainsieve_eventlog::Position;
use chainsieve_price::Feed;

impl ChainLog {
    /// Hands `index` the steps after `after` up to `head` (the stream's
    /// last when the term began), then everything `published` brings,
    /// until `term` ends or the index stops.
    pub async fn feed_index(
        &self,
        after: Position,
        head: Position,
        mut published: mpsc::Receiver<Feed>,
        index: mpsc::Sender<Feed>,
        term: CancellationToken,
    ) {
        if after < head {
            tracing::info!(chain = %self.chain, from = after + 1, to = head, "indexing prices from the log");
            let mut reader = IntoIndex {
                chain: &self.chain,
                expected: after + 1,
                head,
                index: &index,
            };
            match self.linear.read(after + 1, &mut reader, &term).await {
                Ok(Some(())) => {}
                Ok(None) => return,
                Err(error) => {
                    tracing::error!(chain = %self.chain, error = format!("{error:#}"), "cannot index the log's steps");
                    return;
                }
            }
        }
        loop {
            let feed = tokio::select! {
                () = term.cancelled() => return,
                feed = published.recv() => feed,
            };
            let Some(feed) = feed else {
                return;
            };
            if index.send(feed).await.is_err() {
                return;
            }
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
