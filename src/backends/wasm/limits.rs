//! The sandbox limits of a plugin instance, read from the model config's `parameters` with safe defaults:
//!
//! - `wasm_memory_limit_mb` (default 512): the most linear memory an instance may have. A `memory.grow`
//!   past it traps the call with a message naming the limit; the instance is then re-created.
//! - `wasm_execute_timeout_ms` (default 10000; 0 turns it off): how long one `execute` call may run. The
//!   engine's epoch ticks every few milliseconds; at the first tick past the deadline the call traps with a
//!   message naming the timeout, and the instance is re-created.
//!
//! Filesystem, network and environment limits are not settings: a plugin sees its version directory
//! read-only and nothing else (see `Plugin::new_state`).

use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;

use crate::model_config::ModelConfig;

const MEMORY_KEY: &str = "wasm_memory_limit_mb";
const TIMEOUT_KEY: &str = "wasm_execute_timeout_ms";
const DEFAULT_MEMORY_MB: u64 = 512;
const DEFAULT_TIMEOUT_MS: u64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub memory_bytes: usize,
    pub execute_timeout: Option<Duration>,
}

impl Limits {
    /// The limits a config asks for; a value that is not a whole number is a load error naming the key.
    pub fn from_config(config: &ModelConfig) -> Result<Self, String> {
        let number = |key: &str, default: u64| -> Result<u64, String> {
            match config.parameters.get(key) {
                None => Ok(default),
                Some(p) => p.string_value.trim().parse().map_err(|_| {
                    format!("parameter '{key}' must be a whole number, got '{}'", p.string_value)
                }),
            }
        };
        let memory_mb = number(MEMORY_KEY, DEFAULT_MEMORY_MB)?;
        let timeout_ms = number(TIMEOUT_KEY, DEFAULT_TIMEOUT_MS)?;
        Ok(Limits {
            memory_bytes: usize::try_from(memory_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX),
            execute_timeout: (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms)),
        })
    }

    pub fn describe_memory(&self) -> String {
        format!("{} MiB ({MEMORY_KEY})", self.memory_bytes >> 20)
    }

    pub fn describe_timeout(&self) -> String {
        self.execute_timeout.map_or_else(|| "none".into(), |t| format!("{} ms ({TIMEOUT_KEY})", t.as_millis()))
    }
}

/// Enforces the memory limit of one store.
pub struct MemoryCap {
    pub limits: Limits,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.limits.memory_bytes {
            wasmtime::bail!(
                "the plugin exceeded its memory limit of {}: it asked to grow from {} to {} MiB",
                self.limits.describe_memory(),
                current >> 20,
                desired.div_ceil(1 << 20)
            );
        }
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
        assert_eq!(defaults.execute_timeout, Some(Duration::from_secs(10)));
        let set = Limits::from_config(&config(&[(MEMORY_KEY, "64"), (TIMEOUT_KEY, "0")])).unwrap();
        assert_eq!((set.memory_bytes, set.execute_timeout), (64 << 20, None));
        let wrong = Limits::from_config(&config(&[(TIMEOUT_KEY, "soon")])).unwrap_err();
        assert_eq!(wrong, "parameter 'wasm_execute_timeout_ms' must be a whole number, got 'soon'");
    }

    #[test]
    fn growth_past_the_cap_traps_with_the_limit_named() {
        let mut cap = MemoryCap { limits: Limits { memory_bytes: 2 << 20, execute_timeout: None } };
        assert!(cap.memory_growing(1 << 20, 2 << 20, None).unwrap());
        let refused = cap.memory_growing(2 << 20, 3 << 20, None).unwrap_err().to_string();
        assert!(refused.contains("memory limit of 2 MiB (wasm_memory_limit_mb)"), "{refused}");
    }
}
