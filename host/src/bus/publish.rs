//! The ingest's side: each step its pipeline appends goes to the chain's
//! stream, in order, as one message encoded once ([`super::codec`]).
//!
//! Every message names the sequence it expects to follow
//! (`Nats-Expected-Last-Sequence`: its position less one) and carries an id
//! (`Nats-Msg-Id`: chain, position and tag). A retry after a lost
//! acknowledgement finds its own step at its position and is not stored
//! twice; a step whose position another writer took is refused, so the
//! stream stays one linear log whatever the ingests do.

use std::time::Duration;

use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use thiserror::Error;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{ChainLog, codec};
use crate::log::Step;
use crate::log::store::Persist;

/// The longest pause between two tries of a step the bus did not take.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

#[derive(Debug, Error)]
pub enum AppendError {
    /// Another writer holds the position: this ingest no longer leads.
    #[error("{chain}'s stream already has a step at position {position}: another ingest writes it")]
    Fenced { chain: String, position: u64 },
    /// The bus did not take the step (down, slow, restarting); try again.
    #[error("publishing {chain}'s step {position}: {source}")]
    Unavailable {
        chain: String,
        position: u64,
        source: async_nats::jetstream::context::PublishError,
    },
}

impl ChainLog {
    /// Publishes `step` at its position, or says why not.
    pub async fn append(&self, step: &Step) -> Result<(), AppendError> {
        let unavailable = |source| AppendError::Unavailable {
            chain: self.chain.to_string(),
            position: step.position,
            source,
        };
        let fenced = || AppendError::Fenced {
            chain: self.chain.to_string(),
            position: step.position,
        };
        let id = format!("{}:{}:{:016x}", self.chain, step.position, step.tag);
        let message = PublishMessage::build()
            .payload(codec::encode(&step.change).into())
            .message_id(&id)
            .expected_last_sequence(step.position - 1);
        let acked = match self
            .jetstream
            .send_publish(self.subject.clone(), message)
            .await
        {
            Ok(ack) => ack.await,
            Err(error) => Err(error),
        };
        match acked {
            Ok(ack) if ack.sequence == step.position => Ok(()),
            Ok(_) => Err(fenced()),
            // The server checks the expected sequence before duplicates:
            // a retry of a step that landed (its ack lost) finds itself.
            Err(error) if error.kind() == PublishErrorKind::WrongLastSequence => {
                match self.stream.get_raw_message(step.position).await {
                    Ok(stored)
                        if stored.headers.get(NATS_MESSAGE_ID).map(|v| v.as_str())
                            == Some(id.as_str()) =>
                    {
                        Ok(())
                    }
                    _ => Err(fenced()),
                }
            }
            Err(error) => Err(unavailable(error)),
        }
    }
}

/// Publishes the steps the pipeline hands over, in order, until the
/// pipeline stops or `term` ends; a step another ingest already took ends
/// `term` (this ingest no longer leads). A step the bus does not take is
/// tried again, with a growing pause, until it does or `term` ends; what is
/// still queued then is left to the next leader, which reads the node from
/// the log's tail.
pub async fn publish(
    log: ChainLog,
    mut steps: mpsc::UnboundedReceiver<Persist>,
    term: CancellationToken,
) {
    loop {
        let step = tokio::select! {
            biased;
            () = term.cancelled() => return,
            step = steps.recv() => step,
        };
        let Some(Persist { step, .. }) = step else {
            return;
        };
        let mut backoff = Duration::from_millis(50);
        loop {
            match log.append(&step).await {
                Ok(()) => break,
                Err(error @ AppendError::Fenced { .. }) => {
                    tracing::error!(chain = %log.chain, error = %error, "stopped publishing");
                    term.cancel();
                    return;
                }
                Err(error) => {
                    tracing::warn!(chain = %log.chain, error = %error, retry_in = ?backoff, "the bus did not take a step");
                    tokio::select! {
                        () = term.cancelled() => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}
