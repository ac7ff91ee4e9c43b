//! Fault hooks for the tests (the `fault-hooks` feature; never in a
//! release build): [`super::Tasks::inject`] makes a named task fail at its
//! next poll, as if its own code had, so that what the supervisor does
//! next is tested on the real server.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// How an injected fault ends the task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// It panics.
    #[default]
    Panic,
    /// It returns, as a task that stops early does.
    Return,
}

/// One task name's hook: a permit on `fired` (kept while the task is not
/// polling yet) and the fault it stands for.
#[derive(Debug, Default)]
struct Hook {
    fired: Notify,
    fault: Mutex<Fault>,
}

/// Every task name's hook.
#[derive(Debug, Default)]
pub(super) struct Faults {
    hooks: Mutex<HashMap<String, Arc<Hook>>>,
}

impl Faults {
    fn hook(&self, name: &str) -> Arc<Hook> {
        self.hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    pub(super) fn inject(&self, name: &str, fault: Fault) {
        let hook = self.hook(name);
        *hook.fault.lock().unwrap_or_else(PoisonError::into_inner) = fault;
        hook.fired.notify_one();
    }

    /// `task`, ended by the next fault injected for `name`.
    pub(super) fn around<F>(
        &self,
        name: &str,
        task: F,
    ) -> impl Future<Output = anyhow::Result<()>> + Send + 'static
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let hook = self.hook(name);
        let name = name.to_string();
        async move {
            tokio::select! {
                ended = task => ended,
                () = hook.fired.notified() => {
                    match *hook.fault.lock().unwrap_or_else(PoisonError::into_inner) {
                        Fault::Panic => panic!("fault hook: {name} made to panic"),
                        Fault::Return => Ok(()),
                    }
                }
            }
        }
    }
}
