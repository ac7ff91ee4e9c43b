//! Each chain's price journal (docs/architecture.md, The bus): the stream
//! `<prefix>-<chain>-prices`, kept without an age or size limit, holds
//! every write the leading ingest's price index makes, in order. Every
//! other server (edges, standby ingests) applies the writes to its own
//! store in that order, so `token_price` answers the same on each, and the
//! history outlives any one process.
//!
//! A leader writes through the journal ([`JournalRecorder`]): a write
//! enters its own store only once the journal holds it, each at the
//! sequence after the last, so a deposed leader's late write is fenced out
//! and a store is always the journal up to some sequence (which it keeps
//! with the writes, so a restarted server with a price data directory
//! reads on from there).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::linear::{LinearStream, Reader};
use super::{Bus, codec, pause};
use crate::price::record::Recorder;
use crate::price::store::{PriceStore, PriceWrite};

impl Bus {
    /// `chain`'s price journal, its stream created if it does not exist.
    pub async fn prices(&self, chain: &str) -> anyhow::Result<PriceJournal> {
        Ok(PriceJournal {
            linear: self
                .stream(chain, "prices", "-prices", (Duration::ZERO, -1))
                .await?,
        })
    }
}

/// One chain's price journal on the bus.
#[derive(Clone, Debug)]
pub struct PriceJournal {
    linear: LinearStream,
}

impl PriceJournal {
    /// Applies to `store` the journal's writes it lacks, up to the last
    /// one when called, retrying while the bus fails; `None` at
    /// `shutdown`.
    pub async fn catch_up(
        &self,
        store: &Arc<PriceStore>,
        shutdown: &CancellationToken,
    ) -> Option<()> {
        let (from, last) = loop {
            match self.unread(store).await {
                Ok(unread) => break unread,
                Err(error) => {
                    tracing::warn!(journal = %self.linear.name(), error = format!("{error:#}"), "cannot read the price journal; trying again");
                    pause(shutdown).await?;
                }
            }
        };
        if from > last {
            return Some(());
        }
        tracing::info!(journal = %self.linear.name(), from, to = last, "applying the price journal");
        let mut into_store = IntoStore {
            store: store.clone(),
            until: Some(last),
        };
        self.linear.read(from, &mut into_store, shutdown).await
    }

    /// Applies to `store` each write appended to the journal after what it
    /// holds, as it comes, until `shutdown`.
    pub async fn follow(&self, store: Arc<PriceStore>, shutdown: CancellationToken) {
        let Some(from) = self.next_for(&store, &shutdown).await else {
            return;
        };
        let mut into_store = IntoStore { store, until: None };
        self.linear.read(from, &mut into_store, &shutdown).await;
    }

    /// A recorder writing through the journal after `store`'s last write
    /// (caught up by [`PriceJournal::catch_up`]); a write another writer
    /// fenced out, or one the store then fails to keep, ends `term`.
    pub fn recorder(
        &self,
        store: Arc<PriceStore>,
        term: CancellationToken,
    ) -> anyhow::Result<JournalRecorder> {
        let next = store.journaled()? + 1;
        Ok(JournalRecorder {
            journal: self.clone(),
            store,
            term,
            writer: rand::random(),
            next: Mutex::new(next),
        })
    }

    /// The first sequence `store` lacks and the journal's last, refusing
    /// a store that holds more than the journal (a journal deleted and
    /// begun anew under a kept price database).
    async fn unread(&self, store: &PriceStore) -> anyhow::Result<(u64, u64)> {
        let (_, last) = self.linear.bounds().await?;
        let held = store.journaled()?;
        anyhow::ensure!(
            held <= last,
            "the price database holds {held} journal writes but {} has {last}: \
             was the stream deleted? Remove the database to read the journal anew",
            self.linear.name()
        );
        Ok((held + 1, last))
    }

    /// The first sequence `store` lacks; `None` at `shutdown`.
    async fn next_for(&self, store: &PriceStore, shutdown: &CancellationToken) -> Option<u64> {
        loop {
            match store.journaled() {
                Ok(held) => return Some(held + 1),
                Err(error) => {
                    tracing::error!(journal = %self.linear.name(), error = format!("{error:#}"), "cannot read the price database");
                    pause(shutdown).await?;
                }
            }
        }
    }
}

/// Applies each run of journal writes to a store in one transaction, up to
/// `until` if given.
struct IntoStore {
    store: Arc<PriceStore>,
    until: Option<u64>,
}

impl Reader for IntoStore {
    async fn take(&mut self, run: Vec<(u64, Bytes)>) -> anyhow::Result<ControlFlow<()>> {
        let writes = run
            .iter()
            .map(|(sequence, payload)| {
                let write = codec::decode(payload)
                    .with_context(|| format!("decoding price journal write {sequence}"))?;
                Ok((*sequence, write))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        self.store.write_journaled(&writes)?;
        let last = writes.last().map_or(0, |(sequence, _)| *sequence);
        Ok(match self.until {
            Some(until) if last >= until => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        })
    }
}

/// The leading ingest's recorder: each write is appended to the journal
/// at the next sequence, then kept in the store with that sequence.
#[derive(Debug)]
pub struct JournalRecorder {
    journal: PriceJournal,
    store: Arc<PriceStore>,
    /// The leader's term: a write fenced out ends it.
    term: CancellationToken,
    /// Names this recorder's messages, so a retry whose ack was lost finds
    /// its own write and not another writer's.
    writer: u64,
    /// The sequence the next write takes. A mutex because the live index
    /// and the backfill record concurrently, and each write must be
    /// appended and kept before the next takes its sequence.
    next: Mutex<u64>,
}

impl JournalRecorder {
    async fn append(&self, write: PriceWrite) -> anyhow::Result<()> {
        let mut next = self.next.lock().await;
        let sequence = *next;
        let id = format!("{:016x}:{sequence}", self.writer);
        let payload = Bytes::from(codec::encode(&write));
        let linear = &self.journal.linear;
        match linear
            .append_until_taken(sequence, &id, payload, &self.term)
            .await
        {
            Ok(true) => {}
            Ok(false) => anyhow::bail!("the term ended before {} took {write}", linear.name()),
            Err(error) => {
                self.term.cancel();
                return Err(error.into());
            }
        }
        *next += 1;
        // The journal holds it: a store that cannot keep it must not index
        // on (the next term applies it from the journal).
        let kept = self.store.write_journaled(&[(sequence, write)]);
        if kept.is_err() {
            self.term.cancel();
        }
        kept
    }
}

impl Recorder for JournalRecorder {
    fn record(&self, write: PriceWrite) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(self.append(write))
    }
}
