//! A webhook delivered while this process holds its claim: claimed (at
//! once on a server of role `all`; on the bus, once no other edge holds
//! it), its state read fresh from the store (another process may have
//! delivered since this one last did), then delivered until it pauses,
//! the process stops, or the claim is lost: then it is claimed again, and
//! this process stands by.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::claim::{Claim, Claims};
use super::feed::Opened;
use super::worker::{self, Hook, Shared};
use chainsieve_fanout::Frames;

/// A subscription an API call opened (and the claim it took first): the
/// first the worker delivers, if it starts where the store says the
/// webhook got to.
pub(super) struct Opening {
    pub opened: Opened,
    pub frames: Frames,
    /// The cursor it was opened after.
    pub from: Option<String>,
    pub claim: Claim,
}

/// How long to wait before claiming again after the store could not be
/// read.
const UNREADABLE: Duration = Duration::from_secs(1);

/// Claims `hook` and delivers it, until it pauses or `stop`.
pub(super) async fn deliver(
    hook: Arc<Hook>,
    shared: Arc<Shared>,
    claims: Arc<dyn Claims>,
    stop: CancellationToken,
    mut opening: Option<Opening>,
) {
    let id = hook.definition().id.clone();
    loop {
        let (claim, mut first) = match opening.take() {
            Some(Opening {
                opened,
                frames,
                from,
                claim,
            }) => (claim, Some((opened, frames, from))),
            None => match claims.claim(&id, &stop).await {
                Some(claim) => (claim, None),
                None => return,
            },
        };
        let fresh = match shared.store.read(id.clone()).await {
            Ok(fresh) => fresh,
            Err(error) => {
                tracing::warn!(webhook = %id, error = format!("{error:#}"), "cannot read a claimed webhook; claiming it again");
                close(first).await;
                drop(claim);
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(UNREADABLE) => continue,
                }
            }
        };
        // Deleted or paused meanwhile: nothing to deliver.
        let Some((definition, revision, progress)) = fresh.filter(|(d, ..)| d.paused.is_none())
        else {
            close(first).await;
            return;
        };
        if first
            .as_ref()
            .is_some_and(|(.., from)| *from != progress.cursor)
        {
            close(first.take()).await;
        }
        hook.set_definition(definition, revision);
        // A pause applied since the read, or a stop.
        if hook.definition().paused.is_some() || stop.is_cancelled() {
            close(first).await;
            return;
        }
        tracing::info!(webhook = %id, cursor = ?progress.cursor, "delivering");
        hook.hold(progress);
        let running = stop.child_token();
        let run = worker::run(
            hook.clone(),
            shared.clone(),
            running.clone(),
            first.map(|(opened, frames, _)| (opened, frames)),
        );
        tokio::pin!(run);
        let lost = tokio::select! {
            () = &mut run => false,
            () = claim.lost.cancelled() => {
                running.cancel();
                run.await;
                true
            }
        };
        hook.set_held(false);
        drop(claim);
        if !lost || stop.is_cancelled() {
            return;
        }
        tracing::warn!(webhook = %id, "lost its claim; standing by");
    }
}

async fn close(first: Option<(Opened, Frames, Option<String>)>) {
    if let Some((opened, ..)) = first {
        opened.close().await;
    }
}
