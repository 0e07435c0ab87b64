//! Per-call resource limits enforced by the store.

use thiserror::Error;

/// The typed error a memory grow beyond the cap traps with, so the caller can name the limit.
#[derive(Debug, Error)]
#[error("memory limit exceeded: wanted {desired} bytes, limit is {limit} bytes")]
pub struct MemoryLimitExceeded {
    pub desired: usize,
    pub limit: usize,
}

/// Memory and table caps for one call.
pub struct Limiter {
    pub memory: usize,
    pub table_elements: usize,
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let limit = maximum.map_or(self.memory, |m| m.min(self.memory));
        if desired > limit {
            return Err(MemoryLimitExceeded { desired, limit }.into());
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= self.table_elements && maximum.is_none_or(|m| desired <= m))
    }
}
