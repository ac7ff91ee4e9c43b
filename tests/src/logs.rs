//! The servers' logs in tests: shown when `RUST_LOG` is set (run with
//! `-- --nocapture`), or kept by a test that reads what a server said
//! ([`kept`]).
//!
//! Why a global dispatcher is always registered ([`global`]): `tracing`
//! caches each log line's interest for the whole process, asking the
//! registered dispatchers. With exactly one registered — a test's scoped
//! one — it asks instead the dispatcher in scope on the thread that reaches
//! the line first; when that is another test's thread (none in scope), the
//! line is cached as never wanted and the keeping test loses it. With the
//! global one registered too, a line some dispatcher wants is asked again
//! at each event of the dispatcher in scope.

use std::sync::{Arc, Mutex, Once};

use tracing::Dispatch;
use tracing::dispatcher::DefaultGuard;
use tracing_subscriber::EnvFilter;

/// Registers the process's global dispatcher once: the `RUST_LOG` printer
/// when that is set, a dispatcher that keeps nothing otherwise.
pub fn global() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        let dispatch = match std::env::var_os("RUST_LOG") {
            Some(_) => Dispatch::new(
                tracing_subscriber::fmt()
                    .with_env_filter(EnvFilter::from_default_env())
                    .with_test_writer()
                    .finish(),
            ),
            None => Dispatch::new(tracing::subscriber::NoSubscriber::default()),
        };
        // Set only here, once: nothing else in the tests sets one.
        tracing::dispatcher::set_global_default(dispatch)
            .expect("the tests' global dispatcher is set once");
    });
}

/// What was logged on this thread while the guard [`kept`] returned lives.
#[derive(Clone, Default)]
pub struct Kept(Arc<Mutex<Vec<u8>>>);

impl Kept {
    /// Everything logged so far, as text.
    pub fn said(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("the kept log")).into_owned()
    }
}

impl std::io::Write for Kept {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .expect("the kept log")
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Keeps what `filter` (an `EnvFilter` directive) lets through of this
/// thread's logs until the guard is dropped. A current-thread runtime's
/// tasks all run on its thread, so a server started in such a test logs
/// here.
pub fn kept(filter: &str) -> (Kept, DefaultGuard) {
    global();
    let kept = Kept::default();
    let writer = kept.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_env_filter(filter)
        .finish();
    (kept, tracing::subscriber::set_default(subscriber))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The race this module's doc describes, made certain: the line is
    /// reached first on a thread with no dispatcher in scope.
    #[test]
    fn a_line_first_reached_on_another_thread_is_kept() {
        let (kept, _scope) = kept("chainsieve_tests=info");
        let say = || tracing::info!("a line reached on two threads");
        std::thread::spawn(say).join().expect("the other thread");
        say();
        assert!(
            kept.said().contains("a line reached on two threads"),
            "{}",
            kept.said()
        );
    }
}
