//! Every bounded queue between the server's long-lived tasks, watched for
//! its depth in `/metrics` (docs/src/operations.md, Queues). A full queue
//! makes its sender wait: the wait goes back towards the source, which
//! reads its nodes (or generates blocks) no faster than the slowest queue
//! drains; nothing is dropped.

use std::sync::{Mutex, PoisonError};

use tokio::sync::mpsc;

/// A queue's place: the part it serves (a chain's name, `webhooks`) and
/// its own name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueueName {
    pub part: String,
    pub queue: &'static str,
}

/// A queue's depth and bound, now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Depth {
    pub queued: usize,
    pub capacity: usize,
}

/// How one queue is read: `None` once every sender is gone.
type Probe = Box<dyn Fn() -> Option<Depth> + Send + Sync>;

/// The watched queues.
#[derive(Default)]
pub struct Queues {
    /// A std mutex, held to add a probe or read them all (never across an
    /// await).
    probes: Mutex<Vec<(QueueName, Probe)>>,
}

impl std::fmt::Debug for Queues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queues").finish_non_exhaustive()
    }
}

impl Queues {
    /// Watches `sender`'s queue as `part`'s `queue`, weakly: the watch
    /// keeps no queue open, and is forgotten once the queue is gone.
    pub fn watch<T: Send + 'static>(
        &self,
        part: &str,
        queue: &'static str,
        sender: &mpsc::Sender<T>,
    ) {
        let weak = sender.downgrade();
        let probe: Probe = Box::new(move || {
            let sender = weak.upgrade()?;
            let capacity = sender.max_capacity();
            Some(Depth {
                queued: capacity - sender.capacity(),
                capacity,
            })
        });
        let name = QueueName {
            part: part.to_string(),
            queue,
        };
        self.lock().push((name, probe));
    }

    /// A bounded queue of `capacity`, watched as `part`'s `queue`.
    pub fn channel<T: Send + 'static>(
        &self,
        part: &str,
        queue: &'static str,
        capacity: usize,
    ) -> (mpsc::Sender<T>, mpsc::Receiver<T>) {
        let (sender, receiver) = mpsc::channel(capacity);
        self.watch(part, queue, &sender);
        (sender, receiver)
    }

    /// Every open queue's depth, in name order (one ingest term's queues
    /// after another's add up).
    pub fn depths(&self) -> Vec<(QueueName, Depth)> {
        let mut probes = self.lock();
        let mut depths = Vec::with_capacity(probes.len());
        probes.retain(|(name, probe)| match probe() {
            Some(depth) => {
                depths.push((name.clone(), depth));
                true
            }
            None => false,
        });
        drop(probes);
        depths.sort_by(|a, b| a.0.cmp(&b.0));
        depths
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(QueueName, Probe)>> {
        self.probes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_queue_shows_what_waits_in_it_until_it_is_gone() {
        let queues = Queues::default();
        let (sender, mut receiver) = queues.channel::<u32>("eth", "persist", 4);
        sender.send(1).await.expect("room");
        sender.send(2).await.expect("room");
        let name = QueueName {
            part: "eth".into(),
            queue: "persist",
        };
        assert_eq!(
            queues.depths(),
            vec![(
                name.clone(),
                Depth {
                    queued: 2,
                    capacity: 4
                }
            )]
        );
        receiver.recv().await.expect("one");
        assert_eq!(queues.depths()[0].1.queued, 1);
        // The watch keeps nothing open: the receiver sees the end.
        drop(sender);
        assert_eq!(receiver.recv().await, Some(2));
        assert_eq!(receiver.recv().await, None);
        assert!(queues.depths().is_empty());
    }
}
