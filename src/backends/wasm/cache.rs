//! The on-disk cache of compiled components. Compiling a component with Cranelift costs tens of milliseconds
//! (seconds for a Python guest); loading the serialised machine code costs about one. Entries are keyed by
//! a hash of the component bytes, the wasmtime version and the engine's compilation settings, because
//! precompiled code only loads into an identically configured engine of the same version.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

pub struct ComponentCache {
    dir: Option<PathBuf>,
}

/// Whether a component came from the cache or was compiled now; logged so restarts can be checked.
#[derive(Debug, PartialEq, Eq)]
pub enum Origin {
    Cache,
    Compiled,
}

impl ComponentCache {
    /// `None` disables caching (every load compiles).
    pub fn new(dir: Option<PathBuf>) -> Self {
        ComponentCache { dir }
    }

    pub fn load(&self, engine: &Engine, wasm: &[u8]) -> anyhow::Result<(Component, Origin)> {
        let Some(dir) = &self.dir else {
            return Ok((Component::new(engine, wasm)?, Origin::Compiled));
        };
        let path = dir.join(format!("{}.cwasm", cache_key(engine, wasm)));
        if path.exists() {
            // SAFETY: the file was written by `Component::serialize` of this same wasmtime version and engine
            // configuration (both are part of the key), into a cache directory this server owns.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, Origin::Cache)),
                Err(e) => tracing::warn!(path = %path.display(), "ignoring unusable cached component: {e:#}"),
            }
        }
        let component = Component::new(engine, wasm)?;
        if let Err(e) = store(&path, &component.serialize()?) {
            tracing::warn!(path = %path.display(), "cannot cache compiled component: {e:#}");
        }
        Ok((component, Origin::Compiled))
    }
}

fn cache_key(engine: &Engine, wasm: &[u8]) -> String {
    // DefaultHasher::new() uses fixed keys, so this is stable for a given build of the server — which is all
    // the key needs, since a rebuilt server may have a different engine anyway.
    let mut engine_hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut engine_hasher);
    let mut hasher = Sha256::new();
    hasher.update(wasm);
    hasher.update(env!("CARGO_PKG_VERSION").as_bytes());
    hasher.update(engine_hasher.finish().to_le_bytes());
    hex::encode(&hasher.finalize()[..16])
}

/// Writes atomically (temporary file, then rename), so a concurrent reader or a crash never sees half a file.
/// Each write has a temporary file of its own: loads of models sharing a plugin compile it at the same
/// time, and with one shared temporary name a second writer truncated the file that the first had just
/// renamed into place while a third had it mapped, which killed the server with SIGBUS.
fn store(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().expect("cache entries live in the cache directory");
    std::fs::create_dir_all(dir)?;
    let write = WRITES.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().unwrap().to_string_lossy();
    let temporary = dir.join(format!(".{}.{write}.{name}.tmp", std::process::id()));
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(&temporary, path)
}
