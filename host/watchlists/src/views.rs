//! Which edits readers still read the watchlists as of. A chain's pipeline
//! holds a [`View`] of the last edit it has placed in its stream, and each
//! batch it hands on holds its step's view until every filter actor is
//! done with it; the index forgets an edit's flips only once no view
//! before it is left ([`Views::oldest`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};

use super::index::{Index, Seq};

/// How many views of each edit are held, and the index they look into.
#[derive(Debug)]
pub struct Views {
    /// Taken once per step a pipeline hands on and once per view dropped
    /// (never across an await).
    held: Mutex<BTreeMap<Seq, usize>>,
    /// The service's index: read once per batch a view matches; written by
    /// the editor (never across an await).
    index: Arc<RwLock<Index>>,
}

impl Views {
    /// The views into `index`.
    pub fn new(index: Arc<RwLock<Index>>) -> Self {
        Self {
            held: Mutex::default(),
            index,
        }
    }

    /// A view of the watchlists as of edit `edit`, held until dropped.
    pub fn view(self: &Arc<Self>, edit: Seq) -> View {
        *self.lock().entry(edit).or_default() += 1;
        View {
            edit,
            views: self.clone(),
        }
    }

    /// The oldest edit some view is of.
    pub fn oldest(&self) -> Option<Seq> {
        self.lock().keys().next().copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Seq, usize>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The watchlists as of one edit, for as long as it is held.
#[derive(Debug)]
pub struct View {
    edit: Seq,
    views: Arc<Views>,
}

impl View {
    /// The edit it is of: lookups as of it see that edit and those before.
    pub fn edit(&self) -> Seq {
        self.edit
    }

    /// The index, to look a batch's addresses up in as of [`View::edit`]
    /// (hold it for the batch, never across an await).
    pub fn index(&self) -> RwLockReadGuard<'_, Index> {
        self.views
            .index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for View {
    fn drop(&mut self) {
        let mut held = self.views.lock();
        if let Some(count) = held.get_mut(&self.edit) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.edit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_view_held_counts() {
        let views = Arc::new(Views::new(Arc::default()));
        assert_eq!(views.oldest(), None);
        let three = views.view(3);
        let five = views.view(5);
        let again = views.view(3);
        assert_eq!((three.edit(), views.oldest()), (3, Some(3)));
        drop(three);
        assert_eq!(views.oldest(), Some(3), "another view of 3 is held");
        drop(again);
        assert_eq!(views.oldest(), Some(5));
        drop(five);
        assert_eq!(views.oldest(), None);
    }
}
