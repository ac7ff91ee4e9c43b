//! The actor's component: every call to its instance goes through
//! [`Actor::with_instance`], which rebuilds the instance after a failure,
//! makes the subscriptions again in it, and disables a component that keeps
//! failing; a swap replaces the component between two commands.

use anyhow::Context;

use super::Actor;
use super::handle::{FilterStatus, lock};
use crate::contract::Delivery;
use crate::engine::FilterComponent;
use crate::instance::Instance;

/// Failed calls in a row after which a component is disabled: one failure
/// may be bad luck (a deadline hit under load), three are the component.
pub const DISABLE_AFTER: u32 = 3;

/// A fresh instance with every subscription made again in it, and what
/// each said.
struct Resubscribed {
    instance: Box<dyn Instance>,
    outcomes: Vec<(u64, Result<Delivery, String>)>,
}

impl Actor {
    /// Instantiates `component` and makes every subscription again in it.
    /// `Err` when it cannot be instantiated or a call fails.
    fn resubscribed(&self, component: &FilterComponent) -> anyhow::Result<Resubscribed> {
        let mut instance = self.instances.instantiate(component)?;
        let mut outcomes = Vec::with_capacity(self.subscriptions.len());
        for (key, record) in &self.subscriptions {
            let outcome = instance
                .subscribe(*key, &record.params)
                .with_context(|| format!("making subscription {} again", record.id))?;
            outcomes.push((*key, outcome));
        }
        Ok(Resubscribed { instance, outcomes })
    }

    /// Builds a fresh instance of the current component after a failure.
    /// A subscription it now refuses (only a component whose answers change
    /// between instances would) ends with the reason instead of vanishing.
    fn rebuild(&mut self) -> anyhow::Result<()> {
        let Resubscribed { instance, outcomes } = self.resubscribed(&self.component)?;
        for (key, outcome) in outcomes {
            if let Err(refusal) = outcome
                && let Some(record) = self.subscriptions.remove(&key)
            {
                self.replay.leave(key);
                tracing::warn!(chain = %self.chain, topic = %self.topic(), subscription = %record.id, %refusal, "rebuilt filter refused a subscription made again; ending it");
                record.end(&format!(
                    "the {} filter was restarted and refused this subscription: {refusal}",
                    self.topic()
                ));
            }
        }
        self.count_subscribers();
        self.instance = Some(instance);
        Ok(())
    }

    pub(super) fn swap(&mut self, component: FilterComponent) -> Result<(), String> {
        let Resubscribed { instance, outcomes } = self
            .resubscribed(&component)
            .map_err(|e| format!("{e:#}"))?;
        if let Some((key, Err(refusal))) = outcomes.iter().find(|(_, o)| o.is_err()) {
            let id = self.subscriptions.get(key).map(|r| r.id.clone());
            return Err(format!(
                "it refuses live subscription {}: {refusal}",
                id.as_deref().unwrap_or("?")
            ));
        }
        for (key, outcome) in outcomes {
            if let (Ok(delivery), Some(record)) = (outcome, self.subscriptions.get_mut(&key)) {
                record.delivery = delivery;
            }
        }
        tracing::info!(chain = %self.chain, topic = %self.topic(), from = %self.component.origin, to = %component.origin, hash = %component.hash, subscriptions = self.subscriptions.len(), "filter swapped");
        *lock(&self.status) = FilterStatus::of(&component);
        self.component = component;
        self.instance = Some(instance);
        // Replays go on in an instance of the new component.
        self.replay.reset();
        self.failures_in_a_row = 0;
        self.disabled = None;
        Ok(())
    }

    /// Runs `call` on the instance, rebuilding it first if a failure left
    /// none; on failure logs and counts it and returns `None`.
    pub(super) fn with_instance<T>(
        &mut self,
        call: impl FnOnce(&mut dyn Instance) -> anyhow::Result<T>,
    ) -> Option<T> {
        if self.disabled.is_some() {
            return None;
        }
        if self.instance.is_none()
            && let Err(error) = self.rebuild()
        {
            self.failed(error.context("rebuilding the instance"));
            return None;
        }
        let instance = self.instance.as_mut()?;
        match call(instance.as_mut()) {
            Ok(value) => {
                self.failures_in_a_row = 0;
                Some(value)
            }
            Err(error) => {
                self.instance = None;
                self.failed(error);
                None
            }
        }
    }

    pub(super) fn failed(&mut self, error: anyhow::Error) {
        self.failures_in_a_row += 1;
        lock(&self.status).failures += 1;
        tracing::error!(chain = %self.chain, topic = %self.topic(), origin = %self.component.origin, failures_in_a_row = self.failures_in_a_row, error = format!("{error:#}"), "filter call failed; the instance will be rebuilt");
        if self.failures_in_a_row >= DISABLE_AFTER {
            let reason = format!("{DISABLE_AFTER} calls in a row failed, the last with: {error:#}");
            tracing::error!(chain = %self.chain, topic = %self.topic(), origin = %self.component.origin, %reason, "filter disabled; its subscriptions end and new ones are refused until a working component replaces it");
            self.end_all(&format!(
                "the {} filter was disabled: {reason}",
                self.topic()
            ));
            self.instance = None;
            lock(&self.status).disabled = Some(reason.clone());
            self.disabled = Some(reason);
        }
    }

    /// Ends every subscription with an error notification saying why.
    pub(super) fn end_all(&mut self, message: &str) {
        for record in std::mem::take(&mut self.subscriptions).into_values() {
            record.end(message);
        }
        self.replay.clear();
        self.count_subscribers();
    }
}
