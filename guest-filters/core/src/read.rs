//! What matching logic reads of an event, whatever the batch layout: the
//! traits layout 1's views and layout 2's implement, so one filter's rules
//! serve every contract version. A layout-2 view implements them for any
//! field set, and reading a field its set does not declare still fails to
//! compile, where the rules are used with it.

use crate::layout::{LogView, TxView};
use crate::projection::{ProjectedLog, ProjectedTx};

/// A transaction's fields transaction rules read.
pub trait TxRead<'a> {
    fn from(&self) -> &'a [u8; 20];
    /// The receiver; `None` for a contract creation.
    fn to(&self) -> Option<&'a [u8; 20]>;
    /// The 4-byte method selector, if the input has one.
    fn selector(&self) -> Option<[u8; 4]>;
}

/// A transaction's hash, for the rules that read it
/// (`transactionReceipts`'): a trait of its own, so that rules reading
/// only [`TxRead`]'s fields need not declare it.
pub trait TxHashRead<'a> {
    fn hash(&self) -> &'a [u8; 32];
}

impl<'a> TxHashRead<'a> for TxView<'a> {
    #[inline(always)]
    fn hash(&self) -> &'a [u8; 32] {
        TxView::hash(self)
    }
}

impl<'a, const F: u32> TxHashRead<'a> for ProjectedTx<'a, F> {
    #[inline(always)]
    fn hash(&self) -> &'a [u8; 32] {
        ProjectedTx::hash(self)
    }
}

/// A log's fields log rules read.
pub trait LogRead<'a> {
    fn address(&self) -> &'a [u8; 20];
    fn topic_count(&self) -> usize;
    /// Topic `i`, if the log has that many.
    fn topic(&self, i: usize) -> Option<&'a [u8; 32]>;
}

impl<'a> TxRead<'a> for TxView<'a> {
    #[inline(always)]
    fn from(&self) -> &'a [u8; 20] {
        TxView::from(self)
    }
    #[inline(always)]
    fn to(&self) -> Option<&'a [u8; 20]> {
        TxView::to(self)
    }
    #[inline(always)]
    fn selector(&self) -> Option<[u8; 4]> {
        TxView::selector(self)
    }
}

impl<'a, const F: u32> TxRead<'a> for ProjectedTx<'a, F> {
    #[inline(always)]
    fn from(&self) -> &'a [u8; 20] {
        ProjectedTx::from(self)
    }
    #[inline(always)]
    fn to(&self) -> Option<&'a [u8; 20]> {
        ProjectedTx::to(self)
    }
    #[inline(always)]
    fn selector(&self) -> Option<[u8; 4]> {
        ProjectedTx::selector(self)
    }
}

impl<'a> LogRead<'a> for LogView<'a> {
    #[inline(always)]
    fn address(&self) -> &'a [u8; 20] {
        LogView::address(self)
    }
    #[inline(always)]
    fn topic_count(&self) -> usize {
        LogView::topic_count(self)
    }
    #[inline(always)]
    fn topic(&self, i: usize) -> Option<&'a [u8; 32]> {
        LogView::topic(self, i)
    }
}

impl<'a, const F: u32> LogRead<'a> for ProjectedLog<'a, F> {
    #[inline(always)]
    fn address(&self) -> &'a [u8; 20] {
        ProjectedLog::address(self)
    }
    #[inline(always)]
    fn topic_count(&self) -> usize {
        ProjectedLog::topic_count(self)
    }
    #[inline(always)]
    fn topic(&self, i: usize) -> Option<&'a [u8; 32]> {
        ProjectedLog::topic(self, i)
    }
}
