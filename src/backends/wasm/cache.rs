//! The on-disk cache of compiled components. Compiling a component with Cranelift costs tens of milliseconds
//! (seconds for a Python guest); loading the serialised machine code costs a few. Entries are keyed by a
//! hash of the component bytes, the wasmtime version and the engine's compilation settings, because
//! precompiled code only loads into an identically configured engine of the same version.
//!
//! Deserialising runs the machine code it is given, so a damaged entry (a disk error, a partial copy, a
//! stray edit) could crash the server on every start. Each entry therefore begins with the SHA-256 of the
//! serialised code, checked before wasmtime sees a byte; an entry that fails the check is compiled again
//! and replaced. Entries are written to a temporary file, flushed and renamed into place, so a server
//! killed mid-write leaves at most a temporary file, which the next server sweeps away.
//!
//! A component that many models run (the Python runtime, tens of megabytes of machine code) is also kept
//! loaded, once per engine: each model that uses it then costs neither a read nor a deserialisation, and its
//! code is in memory once.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

use crate::backends::leftovers;

/// Temporary entries are named `.tmp-<pid>-…`.
const TEMPORARY: &str = ".tmp-";

/// The checksum at the head of every entry.
const CHECKSUM_LEN: usize = 32;

pub struct ComponentCache {
    dir: Option<PathBuf>,
    /// Shared components kept loaded, by file and engine, with the file's size and modification time when it
    /// was loaded (a rebuilt file is loaded again). The lock is held while one loads, so models that start
    /// together compile it once.
    kept: Mutex<HashMap<(PathBuf, u64), Kept>>,
}

/// A kept component and the size and modification time of its file when it was loaded.
struct Kept {
    size: u64,
    modified: Option<SystemTime>,
    component: Component,
}

/// Where a component came from; logged so restarts can be checked.
#[derive(Debug, PartialEq, Eq)]
pub enum Origin {
    Cache,
    Compiled,
    Kept,
}

impl ComponentCache {
    /// `None` disables caching (every load compiles).
    pub fn new(dir: Option<PathBuf>) -> Self {
        if let Some(dir) = &dir {
            leftovers::sweep(dir, TEMPORARY);
        }
        ComponentCache { dir, kept: Mutex::default() }
    }

    /// The shared component in the file at `path`, loaded once per engine and kept; `read` reads the file.
    pub fn load_kept(
        &self,
        engine: &Engine,
        path: &Path,
        read: impl FnOnce() -> anyhow::Result<Vec<u8>>,
    ) -> anyhow::Result<(Component, Origin)> {
        let metadata = std::fs::metadata(path)?;
        let (size, modified) = (metadata.len(), metadata.modified().ok());
        let mut kept = self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = (path.to_path_buf(), engine_hash(engine));
        if let Some(known) = kept.get(&key).filter(|known| (known.size, known.modified) == (size, modified)) {
            return Ok((known.component.clone(), Origin::Kept));
        }
        let (component, origin) = self.load(engine, &read()?)?;
        kept.insert(key, Kept { size, modified, component: component.clone() });
        Ok((component, origin))
    }

    pub fn load(&self, engine: &Engine, wasm: &[u8]) -> anyhow::Result<(Component, Origin)> {
        let Some(dir) = &self.dir else {
            return Ok((Component::new(engine, wasm)?, Origin::Compiled));
        };
        let path = dir.join(format!("{}.cwasm", cache_key(engine, wasm)));
        match std::fs::read(&path) {
            Ok(entry) => match verified(&entry) {
                // SAFETY: the code was written by `Component::serialize` of this same wasmtime version and
                // engine configuration (both are part of the key), and its checksum matches what was written.
                Some(code) => match unsafe { Component::deserialize(engine, code) } {
                    Ok(component) => return Ok((component, Origin::Cache)),
                    Err(e) => tracing::warn!(path = %path.display(), "ignoring unusable cached component: {e:#}"),
                },
                None => {
                    tracing::warn!(path = %path.display(), "ignoring unusable cached component: damaged (checksum mismatch)")
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %path.display(), "cannot read cached component: {e}"),
        }
        let component = Component::new(engine, wasm)?;
        if let Err(e) = store(&path, &component.serialize()?) {
            tracing::warn!(path = %path.display(), "cannot cache compiled component: {e:#}");
        }
        Ok((component, Origin::Compiled))
    }
}

/// The serialised code of a cache entry, if its checksum matches.
fn verified(entry: &[u8]) -> Option<&[u8]> {
    let (checksum, code) = entry.split_at_checked(CHECKSUM_LEN)?;
    (Sha256::digest(code).as_slice() == checksum).then_some(code)
}

fn cache_key(engine: &Engine, wasm: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(wasm);
    hasher.update(env!("CARGO_PKG_VERSION").as_bytes());
    hasher.update(engine_hash(engine).to_le_bytes());
    hex::encode(&hasher.finalize()[..16])
}

/// A hash of the engine's compilation settings: engines that compile alike hash alike.
fn engine_hash(engine: &Engine) -> u64 {
    // DefaultHasher::new() uses fixed keys, so this is stable for a given build of the server — which is all
    // it needs, since a rebuilt server may have a different engine anyway.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.finish()
}

/// Writes the entry for `code` atomically (temporary file, flushed, then renamed), so a concurrent reader or
/// a crash never sees half a file. Each write has a temporary file of its own: loads of models sharing a
/// plugin compile it at the same time, and with one shared temporary name a second writer truncated the
/// file that the first had just renamed into place while a third had it mapped, which killed the server.
fn store(path: &Path, code: &[u8]) -> std::io::Result<()> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().expect("cache entries live in the cache directory");
    std::fs::create_dir_all(dir)?;
    let write = WRITES.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().unwrap().to_string_lossy();
    let temporary = dir.join(leftovers::name(TEMPORARY, &format!("{write}-{name}")));
    let written = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&Sha256::digest(code))?;
        file.write_all(code)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_entry_is_compiled_again_and_replaced() {
        let dir = std::env::temp_dir().join(format!("tessera-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let engine = Engine::default();
        let wasm = empty_component();
        let cache = ComponentCache::new(Some(dir.clone()));
        assert_eq!(cache.load(&engine, &wasm).unwrap().1, Origin::Compiled);
        assert_eq!(cache.load(&engine, &wasm).unwrap().1, Origin::Cache);
        let entry = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
        let mut bytes = std::fs::read(&entry).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        std::fs::write(&entry, &bytes).unwrap();
        assert_eq!(cache.load(&engine, &wasm).unwrap().1, Origin::Compiled);
        assert_eq!(cache.load(&engine, &wasm).unwrap().1, Origin::Cache);
        std::fs::write(&entry, b"short").unwrap();
        assert_eq!(cache.load(&engine, &wasm).unwrap().1, Origin::Compiled);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The smallest component: the component-model preamble (magic, version 0xd, layer 1) and no sections.
    fn empty_component() -> Vec<u8> {
        vec![0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00]
    }
}
