//! A JetStream stream kept as one linear log, as both of a chain's streams
//! are (its steps, its price journal): each message is written at the
//! sequence its writer expects, so two writers never interleave, and read
//! back in sequence order through an ordered consumer that resumes where
//! it stopped (docs/src/architecture.md, The bus).
//!
//! A consumer is made anew rather than left to recover by itself: the
//! client's ordered consumer asks for an idle heartbeat every 15 s, counts
//! one missed after 30 s without a word and recreates itself at the second
//! (a minute), retrying with pauses up to 10 s; a reconnection, or two
//! seconds of silence while the stream holds more (or does not answer),
//! says within seconds that the consumer went with a server. A shorter
//! heartbeat would not say it sooner than that silence does.

use std::ops::ControlFlow;
use std::time::Duration;

use anyhow::Context;
use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::{Fuse, FusedFuture, FutureExt};
use thiserror::Error;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The longest pause between two tries of a message the bus did not take.
/// Short, since a stream with no leader refuses at once (no server takes
/// its subject) and a longer pause would only delay the first message
/// after its election; a try that waits for an answer is bounded by
/// `REQUEST_TIMEOUT` besides.
const MAX_BACKOFF: Duration = Duration::from_millis(250);

/// The pause before reading the bus again after it failed. Short: a read
/// that failed for want of an answer has already waited
/// [`super::REQUEST_TIMEOUT`].
pub(crate) const RETRY: Duration = Duration::from_millis(250);

/// The first pause before making a consumer anew after a failed one,
/// doubled at each failure in a row up to [`RETRY`].
const MIN_RETRY: Duration = Duration::from_millis(50);

/// Messages handed to a reader at once, at most: what the consumer has at
/// hand, so a catch-up writes in runs while a live follower takes each
/// message as it comes.
const READ_RUN: usize = 256;

/// How long a consumer may deliver nothing before the stream is asked
/// whether it holds messages the consumer has not delivered. A consumer
/// whose stream's leader died stays silent while the stream goes on under
/// a new leader (seen on a three-server cluster); one that lags, or whose
/// stream does not answer (it may have no leader, and then the consumer is
/// likely gone with the old one), is made anew, which waits for the
/// stream's answer.
const STALL_CHECK: Duration = Duration::from_secs(2);

#[derive(Debug, Error)]
pub enum AppendError {
    /// Another writer holds the sequence: this one no longer leads.
    #[error("{stream} already has a message at {sequence}: another ingest writes it")]
    Fenced { stream: String, sequence: u64 },
    /// The bus did not take the message, or did not say whether it had
    /// (down, slow, restarting); try again.
    #[error("publishing {stream}'s message {sequence}: {source}")]
    Unavailable {
        stream: String,
        sequence: u64,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Takes the messages a [`LinearStream`] reads, in sequence order.
pub trait Reader {
    /// Takes a run of (sequence, payload); `Break` stops the reading, and
    /// so does an error (what the reader cannot take, it would not take
    /// the next time either).
    fn take(
        &mut self,
        run: Vec<(u64, Bytes)>,
    ) -> impl Future<Output = anyhow::Result<ControlFlow<()>>> + Send;
}

/// One stream written at expected sequences and read in order.
#[derive(Clone, Debug)]
pub struct LinearStream {
    /// What the stream holds, for messages ("eth's log").
    name: String,
    subject: String,
    /// Its handle for reads and consumers, and the context it publishes
    /// through: both wait `REQUEST_TIMEOUT` at most for an answer.
    stream: stream::Stream<()>,
    jetstream: jetstream::Context,
    /// Counts the connections made to the servers (`Bus::connects`): a
    /// consumer made before the last one may be gone with a restarted
    /// server, and is made anew at once rather than after its heartbeats
    /// fail.
    connects: watch::Receiver<u64>,
}

enum Delivery {
    /// The reader said stop.
    Stopped,
    /// The reader failed.
    Refused(anyhow::Error),
    /// The client reconnected: a restarted server has lost the consumer.
    Reconnected,
    Failed(anyhow::Error),
}

impl LinearStream {
    pub fn new(
        name: String,
        subject: String,
        stream: stream::Stream<()>,
        jetstream: jetstream::Context,
        connects: watch::Receiver<u64>,
    ) -> Self {
        Self {
            name,
            subject,
            stream,
            jetstream,
            connects,
        }
    }

    /// What the stream holds.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stream's first and last sequences (0 for a stream never
    /// written).
    pub async fn bounds(&self) -> anyhow::Result<(u64, u64)> {
        let info = self
            .stream
            .get_info()
            .await
            .with_context(|| format!("reading the state of {}", self.name))?;
        Ok((info.state.first_sequence.max(1), info.state.last_sequence))
    }

    /// The payload at `sequence`; `None` if the stream no longer (or never)
    /// held it.
    pub async fn get(&self, sequence: u64) -> anyhow::Result<Option<Bytes>> {
        match self.stream.get_raw_message(sequence).await {
            Ok(message) => Ok(Some(message.payload)),
            Err(error)
                if error.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound =>
            {
                Ok(None)
            }
            Err(error) => {
                Err(error).with_context(|| format!("reading {}'s message {sequence}", self.name))
            }
        }
    }

    /// Writes `payload` at `sequence`, or says why not. `id` tells this
    /// writer's message from another's at the same sequence: the server
    /// checks the expected sequence before duplicates, so a retry of a
    /// message that landed (its ack lost) is refused, and finds itself.
    pub async fn append(&self, sequence: u64, id: &str, payload: Bytes) -> Result<(), AppendError> {
        let fenced = || AppendError::Fenced {
            stream: self.name.clone(),
            sequence,
        };
        let message = PublishMessage::build()
            .payload(payload)
            .message_id(id)
            .expected_last_sequence(sequence - 1);
        let acked = match self
            .jetstream
            .send_publish(self.subject.clone(), message)
            .await
        {
            Ok(ack) => ack.await,
            Err(error) => Err(error),
        };
        let unavailable = |source| AppendError::Unavailable {
            stream: self.name.clone(),
            sequence,
            source,
        };
        match acked {
            Ok(ack) if ack.sequence == sequence => Ok(()),
            Ok(_) => Err(fenced()),
            Err(error) if error.kind() == PublishErrorKind::WrongLastSequence => {
                match self.stream.get_raw_message(sequence).await {
                    Ok(stored)
                        if stored.headers.get(NATS_MESSAGE_ID).map(|v| v.as_str()) == Some(id) =>
                    {
                        Ok(())
                    }
                    Ok(_) => Err(fenced()),
                    // Whose message is there is unknown yet.
                    Err(error) => Err(unavailable(error.into())),
                }
            }
            Err(error) => Err(unavailable(error.into())),
        }
    }

    /// [`LinearStream::append`], tried with a growing pause until the bus
    /// takes the message: `Ok(false)` if `term` ended first, an error if
    /// another writer holds the sequence.
    pub async fn append_until_taken(
        &self,
        sequence: u64,
        id: &str,
        payload: Bytes,
        term: &CancellationToken,
    ) -> Result<bool, AppendError> {
        let mut backoff = Duration::from_millis(50);
        let mut tries: u64 = 0;
        loop {
            tries += 1;
            match self.append(sequence, id, payload.clone()).await {
                Ok(()) => return Ok(true),
                Err(error @ AppendError::Fenced { .. }) => return Err(error),
                Err(error) => {
                    // Tries 1, 2, 4, 8…: a stream electing a leader for
                    // seconds says so a few times, not at every try.
                    if tries.is_power_of_two() {
                        tracing::warn!(error = %error, tries, retry_in = ?backoff, "the bus did not take a message");
                    }
                    tokio::select! {
                        () = term.cancelled() => return Ok(false),
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// Hands `reader` every message from `next` on, in order, until it
    /// says stop (`Some`), fails (the error), or `shutdown` (`None`).
    /// Whatever fails on the bus is read again from the first message the
    /// reader has not taken, so nothing is skipped and nothing is taken
    /// twice.
    pub async fn read(
        &self,
        mut next: u64,
        reader: &mut impl Reader,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<()>> {
        let mut retry = MIN_RETRY;
        let mut failures: u64 = 0;
        loop {
            let from = next;
            let stopped = tokio::select! {
                () = shutdown.cancelled() => return Ok(None),
                stopped = self.deliver(&mut next, reader) => stopped,
            };
            if next > from {
                retry = MIN_RETRY;
                failures = 0;
            }
            match stopped {
                Delivery::Stopped => return Ok(Some(())),
                Delivery::Refused(error) => return Err(error),
                Delivery::Reconnected => {
                    tracing::info!(stream = %self.name, from = next, "reconnected to the bus; reading anew");
                }
                Delivery::Failed(error) => {
                    // Failures in a row 1, 2, 4, 8…: a stream electing a
                    // leader says so a few times, not at every try.
                    failures += 1;
                    if failures.is_power_of_two() {
                        tracing::warn!(stream = %self.name, from = next, error = format!("{error:#}"), failures, retry_in = ?retry, "reading stopped; resuming");
                    }
                    tokio::select! {
                        () = shutdown.cancelled() => return Ok(None),
                        () = tokio::time::sleep(retry) => {}
                    }
                    retry = (retry * 2).min(RETRY);
                }
            }
        }
    }

    /// Delivers messages from `next` on through one ordered consumer until
    /// it fails or the reader stops; `next` follows what was taken.
    async fn deliver(&self, next: &mut u64, reader: &mut impl Reader) -> Delivery {
        let messages = async {
            let consumer = self
                .stream
                .create_consumer(pull::OrderedConfig {
                    filter_subject: self.subject.clone(),
                    deliver_policy: DeliverPolicy::ByStartSequence {
                        start_sequence: *next,
                    },
                    ..Default::default()
                })
                .await
                .context("creating an ordered consumer")?;
            consumer.messages().await.context("pulling messages")
        };
        let mut connects = self.connects.clone();
        connects.mark_unchanged();
        let mut messages = match messages.await {
            Ok(messages) => messages.ready_chunks(READ_RUN),
            Err(error) => return Delivery::Failed(error),
        };
        // Silence for STALL_CHECK starts a check of the stream's state,
        // which runs beside the consumer (a message that comes meanwhile
        // drops it) and waits REQUEST_TIMEOUT at most.
        let silence = tokio::time::sleep(STALL_CHECK);
        let check = Fuse::terminated();
        tokio::pin!(silence, check);
        loop {
            let chunk = tokio::select! {
                chunk = messages.next() => chunk,
                _ = connects.changed() => return Delivery::Reconnected,
                () = &mut silence, if check.is_terminated() => {
                    check.set(self.bounds().fuse());
                    continue;
                }
                bounds = &mut check => match bounds {
                    Ok((_, last)) if last >= *next => {
                        return Delivery::Failed(anyhow::anyhow!(
                            "the consumer delivered nothing for {STALL_CHECK:?} while the stream holds {next}..={last}"
                        ));
                    }
                    Ok(_) => {
                        silence.as_mut().reset(tokio::time::Instant::now() + STALL_CHECK);
                        continue;
                    }
                    Err(error) => {
                        return Delivery::Failed(error.context(format!(
                            "the consumer delivered nothing for {STALL_CHECK:?} and the stream did not say whether it holds more"
                        )));
                    }
                },
            };
            silence
                .as_mut()
                .reset(tokio::time::Instant::now() + STALL_CHECK);
            check.set(Fuse::terminated());
            let Some(chunk) = chunk else {
                return Delivery::Failed(anyhow::anyhow!("the consumer ended"));
            };
            let mut run = Vec::with_capacity(chunk.len());
            let mut failed = None;
            for message in chunk {
                let read = message.map_err(anyhow::Error::from).and_then(|message| {
                    let sequence = message
                        .info()
                        .map_err(|error| anyhow::anyhow!("{error}"))?
                        .stream_sequence;
                    Ok((sequence, message.payload.clone()))
                });
                match read {
                    Ok((sequence, payload)) if sequence >= *next => run.push((sequence, payload)),
                    Ok(_) => {}
                    Err(error) => {
                        failed = Some(error);
                        break;
                    }
                }
            }
            if let Some(&(last, _)) = run.last() {
                match reader.take(run).await {
                    Ok(ControlFlow::Continue(())) => *next = last + 1,
                    Ok(ControlFlow::Break(())) => return Delivery::Stopped,
                    Err(error) => return Delivery::Refused(error),
                }
            }
            if let Some(error) = failed {
                return Delivery::Failed(error);
            }
        }
    }
}
