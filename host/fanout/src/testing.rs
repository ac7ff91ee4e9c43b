//! A stand-in socket for the unit tests of the queue and of its senders.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::Wire;

/// A socket that takes up to `room` bytes, then nothing (a peer that
/// stopped reading), keeping what it took and counting the writes that
/// took something.
#[derive(Debug, Default)]
pub struct Pipe {
    taken: Mutex<Vec<u8>>,
    room: AtomicUsize,
    writes: AtomicUsize,
    /// The writes so far, for a test to wait on from another thread.
    written: tokio::sync::watch::Sender<usize>,
}

impl Pipe {
    pub fn with_room(room: usize) -> Arc<Self> {
        Arc::new(Self {
            room: AtomicUsize::new(room),
            ..Self::default()
        })
    }

    /// A [`Wire`] writing into this pipe.
    pub fn wire(self: &Arc<Self>) -> Arc<dyn Wire> {
        Arc::new(Wired(self.clone()))
    }

    /// The bytes taken so far.
    pub fn taken(&self) -> Vec<u8> {
        self.taken.lock().expect("unpoisoned").clone()
    }

    /// The writes that took something.
    pub fn writes(&self) -> usize {
        self.writes.load(Ordering::Relaxed)
    }

    /// Waits until the pipe has taken a write.
    pub async fn written(&self) {
        let mut written = self.written.subscribe();
        let waited = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            written.wait_for(|writes| *writes > 0),
        );
        waited
            .await
            .expect("a write in time")
            .expect("the pipe lives");
    }
}

#[derive(Debug)]
struct Wired(Arc<Pipe>);

impl Wire for Wired {
    fn try_write(&self, bytes: &[u8]) -> std::io::Result<usize> {
        let pipe = &self.0;
        let room = pipe.room.load(Ordering::Relaxed);
        if room == 0 {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        let sent = room.min(bytes.len());
        pipe.room.store(room - sent, Ordering::Relaxed);
        pipe.taken
            .lock()
            .expect("unpoisoned")
            .extend_from_slice(&bytes[..sent]);
        let writes = pipe.writes.fetch_add(1, Ordering::Relaxed) + 1;
        pipe.written.send_replace(writes);
        Ok(sent)
    }
}
