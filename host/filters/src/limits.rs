//! What one filter instance may use, enforced per store.
//!
//! - Memory: growing linear memory past [`InstanceLimits::memory`] fails
//!   the way wasm says it may (`memory.grow` returns -1). The limiter
//!   remembers the refusal, so when the guest then traps (Rust aborts on
//!   allocation failure) the error says the cap was the cause.
//! - Tables: [`TABLE_ELEMENTS`] elements (indirect-call tables of a normal
//!   guest hold a few hundred).
//! - Time: the call deadline lives in the engine (epoch interruption).

use wasmtime::ResourceLimiter;

/// Elements a table may grow to.
pub const TABLE_ELEMENTS: usize = 100_000;

/// Instances, tables and memories one store may create: a component
/// instantiates a handful of core modules (guest, WASI adapter shims).
const INSTANCES: usize = 16;
const TABLES: usize = 16;
const MEMORIES: usize = 4;

/// The limiter of one store.
#[derive(Debug)]
pub struct InstanceLimits {
    /// Bytes of linear memory, per memory.
    memory: usize,
    /// The size a refused `memory.grow` asked for, until read.
    refused_growth: Option<usize>,
}

impl InstanceLimits {
    pub fn new(memory: usize) -> Self {
        Self {
            memory,
            refused_growth: None,
        }
    }

    /// Why the last call may have failed, if the memory cap refused a
    /// growth during it; clears the record.
    pub fn take_refusal(&mut self) -> Option<String> {
        self.refused_growth.take().map(|desired| {
            format!(
                "the instance hit its memory cap of {} MiB (it asked for {} MiB)",
                self.memory >> 20,
                desired.div_ceil(1 << 20)
            )
        })
    }
}

impl ResourceLimiter for InstanceLimits {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.memory && maximum.is_none_or(|max| desired <= max);
        if !allowed {
            self.refused_growth = Some(desired);
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= TABLE_ELEMENTS && maximum.is_none_or(|max| desired <= max))
    }

    fn instances(&self) -> usize {
        INSTANCES
    }

    fn tables(&self) -> usize {
        TABLES
    }

    fn memories(&self) -> usize {
        MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn memory_grows_up_to_the_cap_and_no_further() {
        let mut limits = InstanceLimits::new(16 * MIB);
        assert!(limits.memory_growing(0, 16 * MIB, None).expect("no error"));
        assert_eq!(limits.take_refusal(), None);
        assert!(
            !limits
                .memory_growing(16 * MIB, 16 * MIB + 65_536, None)
                .expect("a refusal is not an error")
        );
        assert_eq!(
            limits.take_refusal().as_deref(),
            Some("the instance hit its memory cap of 16 MiB (it asked for 17 MiB)")
        );
        assert_eq!(limits.take_refusal(), None, "read once");
    }

    #[test]
    fn the_module_declared_maximum_also_holds() {
        let mut limits = InstanceLimits::new(16 * MIB);
        assert!(!limits.memory_growing(0, 2 * MIB, Some(MIB)).expect("ok"));
    }

    #[test]
    fn tables_are_capped() {
        let mut limits = InstanceLimits::new(MIB);
        assert!(limits.table_growing(0, TABLE_ELEMENTS, None).expect("ok"));
        assert!(
            !limits
                .table_growing(0, TABLE_ELEMENTS + 1, None)
                .expect("ok")
        );
    }
}
