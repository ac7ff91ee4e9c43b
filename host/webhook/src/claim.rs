//! Who may deliver a webhook: on a server of role `all`, this process,
//! always ([`Always`]); on the bus, the edge holding the webhook's lease
//! (`webhook/bus.rs`). A worker delivers only while its claim holds, so
//! exactly one process delivers a webhook at a time
//! (docs/src/architecture.md, Webhooks).

use futures_util::future::BoxFuture;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Claims webhooks for this process.
pub trait Claims: Send + Sync + 'static {
    /// Waits until this process holds `id`'s claim; `None` once `stop` is
    /// cancelled first.
    fn claim<'a>(
        &'a self,
        id: &'a str,
        stop: &'a CancellationToken,
    ) -> BoxFuture<'a, Option<Claim>>;
}

/// A claim held. `lost` is cancelled if it is lost; dropping the claim
/// gives it back.
#[derive(Debug)]
pub struct Claim {
    pub lost: CancellationToken,
    /// Cancels `give_back` when the claim is dropped: its keeper lets go.
    _give_back: DropGuard,
}

impl Claim {
    /// A claim kept by someone watching `give_back` (cancelled when this
    /// claim is dropped), who cancels `lost` if it is lost.
    pub fn new(lost: CancellationToken, give_back: CancellationToken) -> Self {
        Self {
            lost,
            _give_back: give_back.drop_guard(),
        }
    }
}

/// A single process holds every claim, at once, for good.
#[derive(Debug, Default)]
pub struct Always;

impl Claims for Always {
    fn claim<'a>(
        &'a self,
        _id: &'a str,
        stop: &'a CancellationToken,
    ) -> BoxFuture<'a, Option<Claim>> {
        let claim = (!stop.is_cancelled())
            .then(|| Claim::new(CancellationToken::new(), CancellationToken::new()));
        Box::pin(async move { claim })
    }
}
