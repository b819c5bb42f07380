//! The sandbox limits of a plugin instance, read from the model config's `parameters` with safe defaults:
//!
//! - `wasm_memory_limit_mb` (default 512): the most memory an instance may have: its linear memory plus
//!   the tensors it asked the host to hold (`tensor-data` handles). A `memory.grow` or a new tensor past it
//!   traps the call with a message naming the limit; the instance is then re-created.
//! - `wasm_memory_recycle_mb` (default three quarters of the limit; 0 turns it off): an instance whose linear
//!   memory has grown to this size is replaced by a fresh one after the call that grew it (`finalize`, then
//!   a new instance is initialised for the next call), so memory that leaks in the guest (a model's own
//!   leaks, or its bindings': see `tensor-data.expect-stdout` in the contract) never traps a request. Models
//!   whose instances hold state between calls (decoupled and sequence models) are not recycled.
//! - `wasm_execute_timeout_ms` (default 10000; 0 turns it off): how long one `execute` call may run. The
//!   engine's epoch ticks every few milliseconds while a plugin runs; at the first tick past the deadline
//!   the call traps with a message naming the timeout, and the instance is re-created.
//! - `wasm_fuel` (default: none): a budget of fuel (wasmtime's measure of executed instructions) for each
//!   call into the plugin. A plugin that uses it up traps with a message naming the budget. Plugins with a
//!   budget run on an engine that counts fuel, which costs time, so plugins without one do not pay for it.
//!
//! Filesystem, network and environment limits are not settings: a plugin sees its version directory
//! read-only and nothing else (see `Plugin::new_state`).

use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;

use crate::error::LoadResult;
use crate::model_config::{self, ModelConfig};

const MEMORY_KEY: &str = "wasm_memory_limit_mb";
const RECYCLE_KEY: &str = "wasm_memory_recycle_mb";
const TIMEOUT_KEY: &str = "wasm_execute_timeout_ms";
const FUEL_KEY: &str = "wasm_fuel";
const DEFAULT_MEMORY_MB: u64 = 512;
const DEFAULT_TIMEOUT_MS: u64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub memory_bytes: usize,
    /// The linear memory at which an instance is replaced after its call, if it may be.
    pub recycle_bytes: Option<usize>,
    pub execute_timeout: Option<Duration>,
    /// Fuel for each call, when the config sets a budget.
    pub fuel: Option<u64>,
}

impl Limits {
    /// The limits a config asks for; a value that is not a whole number is a load error naming the key.
    pub fn from_config(config: &ModelConfig) -> LoadResult<Self> {
        let number = |key: &str, default: u64| -> LoadResult<u64> {
            Ok(model_config::parameter(config, key, "a whole number")?.unwrap_or(default))
        };
        let memory_mb = number(MEMORY_KEY, DEFAULT_MEMORY_MB)?;
        let timeout_ms = number(TIMEOUT_KEY, DEFAULT_TIMEOUT_MS)?;
        let fuel = match config.parameters.get(FUEL_KEY) {
            None => None,
            Some(_) => Some(number(FUEL_KEY, 0)?).filter(|&fuel| fuel > 0),
        };
        let recycle_mb = number(RECYCLE_KEY, memory_mb / 4 * 3)?;
        let bytes = |mb: u64| usize::try_from(mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
        Ok(Limits {
            memory_bytes: bytes(memory_mb),
            recycle_bytes: (recycle_mb > 0).then(|| bytes(recycle_mb)),
            execute_timeout: (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms)),
            fuel,
        })
    }

    pub fn describe_memory(&self) -> String {
        format!("{} MiB ({MEMORY_KEY})", self.memory_bytes >> 20)
    }

    pub fn describe_recycling(&self) -> String {
        self.recycle_bytes.map_or_else(|| "none".into(), |bytes| format!("{} MiB ({RECYCLE_KEY})", bytes >> 20))
    }

    pub fn describe_fuel(&self) -> String {
        self.fuel.map_or_else(|| "none".into(), |fuel| format!("{fuel} ({FUEL_KEY})"))
    }

    pub fn describe_timeout(&self) -> String {
        self.execute_timeout.map_or_else(|| "none".into(), |t| format!("{} ms ({TIMEOUT_KEY})", t.as_millis()))
    }
}

/// Enforces the memory limit of one store over its linear memory and the tensor data held for it.
pub struct MemoryCap {
    pub limits: Limits,
    /// Bytes of linear memory the instance has grown to.
    linear: usize,
    /// Bytes of tensor data the host holds for the instance's handles.
    held: usize,
}

/// What one tensor handle counts against the cap at least, so that a plugin making empty handles in a
/// loop still reaches its limit instead of growing the host's handle table without bound.
const HANDLE_COST: usize = 64;

impl MemoryCap {
    pub fn new(limits: Limits) -> Self {
        MemoryCap { limits, linear: 0, held: 0 }
    }

    /// Counts a handle of `bytes` the plugin asks for (a new tensor, a shared handle, a BLS answer), or
    /// traps if it would take the instance past its limit. Returns what was counted, for `release`.
    pub fn hold(&mut self, bytes: usize) -> wasmtime::Result<usize> {
        let cost = bytes.max(HANDLE_COST);
        if self.linear + self.held + cost > self.limits.memory_bytes {
            wasmtime::bail!(
                "the plugin exceeded its memory limit of {}: it holds {} MiB of tensors beside {} MiB of memory and asked for {} MiB more",
                self.limits.describe_memory(),
                self.held >> 20,
                self.linear >> 20,
                cost.div_ceil(1 << 20)
            );
        }
        self.held += cost;
        Ok(cost)
    }

    /// Whether the instance's linear memory has reached the size at which it is to be replaced.
    pub fn due_for_recycling(&self) -> bool {
        self.limits.recycle_bytes.is_some_and(|at| self.linear >= at)
    }

    /// The bytes of linear memory the instance has grown to.
    pub fn linear_bytes(&self) -> usize {
        self.linear
    }

    /// Stops counting a handle (the plugin dropped it or gave it back); `cost` is what `hold` returned.
    pub fn release(&mut self, cost: usize) {
        self.held -= cost;
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let linear = self.linear - current.min(self.linear) + desired;
        if linear + self.held > self.limits.memory_bytes {
            wasmtime::bail!(
                "the plugin exceeded its memory limit of {}: it asked to grow from {} to {} MiB",
                self.limits.describe_memory(),
                (self.linear + self.held) >> 20,
                (linear + self.held).div_ceil(1 << 20)
            );
        }
        self.linear = linear;
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, _desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(true)
    }
}

/// When the `execute` call under way must stop, if it has a deadline.
pub fn deadline(limits: &Limits) -> Option<Instant> {
    limits.execute_timeout.map(|timeout| Instant::now() + timeout)
}

/// Waits for `work` no later than `deadline` (`None`: no limit); `None` when the deadline came first. The
/// plugin's own deadline cannot fire while the host waits in one of its calls (no guest code runs to see the
/// epoch), so every host call that waits (BLS, a send to a slow client) is bounded with this.
pub async fn by_deadline<T>(deadline: Option<Instant>, work: impl std::future::Future<Output = T>) -> Option<T> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline.into(), work).await.ok(),
        None => Some(work.await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::ModelParameter;

    fn config(parameters: &[(&str, &str)]) -> ModelConfig {
        let mut config = ModelConfig::default();
        for (key, value) in parameters {
            config.parameters.insert(key.to_string(), ModelParameter { string_value: value.to_string() });
        }
        config
    }

    #[test]
    fn defaults_settings_and_mistakes() {
        let defaults = Limits::from_config(&config(&[])).unwrap();
        assert_eq!(defaults.memory_bytes, 512 << 20);
        assert_eq!(defaults.recycle_bytes, Some(384 << 20));
        assert_eq!(defaults.execute_timeout, Some(Duration::from_secs(10)));
        let set = Limits::from_config(&config(&[(MEMORY_KEY, "64"), (TIMEOUT_KEY, "0")])).unwrap();
        assert_eq!(
            (set.memory_bytes, set.recycle_bytes, set.execute_timeout, set.fuel),
            (64 << 20, Some(48 << 20), None, None)
        );
        let never = Limits::from_config(&config(&[(RECYCLE_KEY, "0")])).unwrap();
        assert_eq!(never.recycle_bytes, None);
        let fueled = Limits::from_config(&config(&[(FUEL_KEY, "1000000")])).unwrap();
        assert_eq!(fueled.fuel, Some(1_000_000));
        let wrong = Limits::from_config(&config(&[(TIMEOUT_KEY, "soon")])).unwrap_err();
        assert_eq!(wrong, "parameter 'wasm_execute_timeout_ms' must be a whole number, got 'soon'");
    }

    #[test]
    fn growth_past_the_cap_traps_with_the_limit_named() {
        let mut cap =
            MemoryCap::new(Limits { memory_bytes: 2 << 20, recycle_bytes: None, execute_timeout: None, fuel: None });
        assert!(cap.memory_growing(0, 1 << 20, None).unwrap());
        assert!(cap.memory_growing(1 << 20, 2 << 20, None).unwrap());
        let refused = cap.memory_growing(2 << 20, 3 << 20, None).unwrap_err().to_string();
        assert!(refused.contains("memory limit of 2 MiB (wasm_memory_limit_mb)"), "{refused}");
    }

    #[test]
    fn an_instance_is_due_for_recycling_once_its_memory_reaches_the_mark() {
        let limits = Limits { memory_bytes: 4 << 20, recycle_bytes: Some(3 << 20), execute_timeout: None, fuel: None };
        let mut cap = MemoryCap::new(limits);
        assert!(cap.memory_growing(0, 2 << 20, None).unwrap());
        assert!(!cap.due_for_recycling());
        assert!(cap.memory_growing(2 << 20, 3 << 20, None).unwrap());
        assert!(cap.due_for_recycling());
        let never = MemoryCap::new(Limits { recycle_bytes: None, ..limits });
        assert!(!never.due_for_recycling());
    }

    #[test]
    fn tensors_held_for_the_plugin_count_against_the_cap() {
        let mut cap =
            MemoryCap::new(Limits { memory_bytes: 2 << 20, recycle_bytes: None, execute_timeout: None, fuel: None });
        assert!(cap.memory_growing(0, 1 << 20, None).unwrap());
        let half = cap.hold(512 << 10).unwrap();
        let refused = cap.hold(1 << 20).unwrap_err().to_string();
        assert!(refused.contains("memory limit of 2 MiB"), "{refused}");
        assert!(cap.memory_growing(1 << 20, (2 << 20) - (256 << 10), None).is_err(), "tensors leave less room to grow");
        cap.release(half);
        let whole = cap.hold(1 << 20).unwrap();
        // Empty handles still cost something, so that making them without end reaches the limit.
        assert!(cap.hold(0).is_err(), "the cap is full");
        cap.release(whole);
        let empty = cap.hold(0).unwrap();
        assert_eq!(empty, HANDLE_COST);
        cap.release(empty);
        assert_eq!(cap.held, 0);
    }
}
