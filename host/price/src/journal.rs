//! Each chain's price journal (docs/src/architecture.md, The bus): the stream
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

use crate::record::Recorder;
use crate::store::{PriceStore, PriceWrite};
use chainsieve_bus::linear::{LinearStream, Reader};
use chainsieve_bus::{Bus, codec, pause};

/// One chain's price journal on the bus.
#[derive(Clone, Debug)]
pub struct PriceJournal {
    linear: LinearStream,
}

impl PriceJournal {
    /// `chain`'s price journal on `bus`, its stream created if it does
    /// not exist.
    pub async fn open(bus: &Bus, chain: &str) -> anyhow::Result<Self> {
        Ok(Self {
            linear: bus
                .stream(chain, "prices", "-prices", (Duration::ZERO, -1))
                .await?,
        })
    }

    /// Applies to `store` the journal's writes it lacks, up to the last
    /// one when called (what fails on the bus is tried again); `None` at
    /// `shutdown`. An error means `store` cannot take the journal: it
    /// holds history of its own or more writes than the journal, or a
    /// write cannot be read or kept.
    pub async fn catch_up(
        &self,
        store: &Arc<PriceStore>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<()>> {
        let from = self.first_unread(store)?;
        let last = loop {
            // A standby that got the lease stops following at once, not
            // once the bus answers: its lease waits to be renewed.
            let bounds = tokio::select! {
                () = shutdown.cancelled() => return Ok(None),
                bounds = self.linear.bounds() => bounds,
            };
            match bounds {
                Ok((_, last)) => break last,
                Err(error) => {
                    tracing::warn!(journal = %self.linear.name(), error = format!("{error:#}"), "cannot read the price journal; trying again");
                    if pause(shutdown).await.is_none() {
                        return Ok(None);
                    }
                }
            }
        };
        anyhow::ensure!(
            from - 1 <= last,
            "the price database holds {} journal writes but {} has {last}: \
             was the stream deleted? Remove the database to read the journal anew",
            from - 1,
            self.linear.name()
        );
        if from > last {
            return Ok(Some(()));
        }
        tracing::info!(journal = %self.linear.name(), from, to = last, "applying the price journal");
        let mut into_store = IntoStore {
            store: store.clone(),
            until: Some(last),
        };
        self.linear.read(from, &mut into_store, shutdown).await
    }

    /// [`PriceJournal::catch_up`], then applies each write appended to the
    /// journal as it comes, until `shutdown` or an error.
    pub async fn follow(
        &self,
        store: Arc<PriceStore>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        if self.catch_up(&store, &shutdown).await?.is_none() {
            return Ok(());
        }
        let from = self.first_unread(&store)?;
        let mut into_store = IntoStore { store, until: None };
        self.linear.read(from, &mut into_store, &shutdown).await?;
        Ok(())
    }

    /// A recorder writing through the journal after `store`'s last write
    /// (caught up by [`PriceJournal::catch_up`]); a write another writer
    /// fenced out, or one the store then fails to keep, ends `term`.
    pub fn recorder(
        &self,
        store: Arc<PriceStore>,
        term: CancellationToken,
    ) -> anyhow::Result<JournalRecorder> {
        let next = self.first_unread(&store)?;
        Ok(JournalRecorder {
            journal: self.clone(),
            store,
            term,
            writer: rand::random(),
            next: Mutex::new(Some(next)),
        })
    }

    /// The first journal sequence `store` lacks, refusing a store whose
    /// history did not come from a journal (a server of role `all` wrote
    /// it): its positions are another log's.
    fn first_unread(&self, store: &PriceStore) -> anyhow::Result<u64> {
        let held = store.journaled()?;
        anyhow::ensure!(
            held > 0 || store.is_empty()?,
            "the price database holds history a server of role `all` indexed, not {}: \
             give this server a data_dir of its own",
            self.linear.name()
        );
        Ok(held + 1)
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
    /// The sequence the next write takes; `None` once a write failed,
    /// after which this term records nothing (a write at that sequence
    /// would carry the failed one's id). A mutex because the live index and
    /// the backfill record concurrently, and each write must be appended
    /// and kept before the next takes its sequence.
    next: Mutex<Option<u64>>,
}

impl JournalRecorder {
    async fn append(&self, write: PriceWrite) -> anyhow::Result<()> {
        let mut next = self.next.lock().await;
        let linear = &self.journal.linear;
        let Some(sequence) = *next else {
            anyhow::bail!("{} took no more of this term's writes", linear.name());
        };
        // Whatever fails below, this term writes no more.
        *next = None;
        let id = format!("{:016x}:{sequence}", self.writer);
        let payload = Bytes::from(codec::encode(&write));
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
        // The journal holds it: a store that cannot keep it must not index
        // on (the next term applies it from the journal).
        if let Err(error) = self.store.write_journaled(&[(sequence, write)]) {
            self.term.cancel();
            return Err(error);
        }
        *next = Some(sequence + 1);
        Ok(())
    }
}

impl Recorder for JournalRecorder {
    fn record(&self, write: PriceWrite) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(self.append(write))
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{Address, B256, U256};
    use chainsieve_bus::codec::{decode, encode};

    use crate::store::{BlockUpdate, Pool, PoolKind, PoolState, PriceWrite, Token};

    /// Every kind of price write comes back as it went (U256 states,
    /// both pool kinds, a token's name).
    #[test]
    fn price_writes_round_trip() {
        let pool = Pool {
            address: Address::repeat_byte(0xaa),
            kind: PoolKind::V3,
            token0: Address::repeat_byte(1),
            token1: Address::repeat_byte(2),
            factory: Address::repeat_byte(0xf0),
        };
        let writes = [
            PriceWrite::Block {
                update: BlockUpdate {
                    number: 7,
                    hash: B256::repeat_byte(7),
                    timestamp: 1_700_000_000,
                    pools: vec![pool],
                    states: vec![
                        (
                            pool.address,
                            PoolState::V3 {
                                sqrt_price_x96: U256::MAX >> 96,
                                liquidity: u128::MAX,
                            },
                        ),
                        (
                            Address::repeat_byte(0xbb),
                            PoolState::V2 {
                                reserve0: U256::from(1),
                                reserve1: U256::from(u128::MAX),
                            },
                        ),
                    ],
                },
                position: Some(41),
            },
            PriceWrite::RollBack {
                number: 7,
                position: 42,
            },
            PriceWrite::Token {
                address: Address::repeat_byte(1),
                token: Token {
                    name: "Wrapped Ether".into(),
                    decimals: 18,
                },
            },
            PriceWrite::Backfilled {
                next: 1_000,
                end: 2_000,
            },
        ];
        for write in writes {
            let back: PriceWrite = decode(&encode(&write)).expect("decodes");
            assert_eq!(back, write);
        }
    }
}
