//! Content fingerprints of a model directory, so that poll mode can tell what changed: a hash of the config
//! file's bytes, and one per version directory over every file in it (relative path, size and bytes). File
//! contents are compared rather than modification times, which copies, `touch` and some volume mounts make
//! unreliable. Hashing reads the files at every poll; model files are read at load anyway, and the poll
//! interval is seconds.

use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::versions;
use crate::content_hash::{self, Hash};
use crate::model_files;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    /// The config file's content hash; `None` when there is no config file.
    pub config: Option<Hash>,
    /// Every numeric version directory, by version.
    pub versions: BTreeMap<i64, Hash>,
}

impl Fingerprint {
    /// Fingerprints the model in `model_dir`, whose config file is `config_file`.
    pub fn of(model_dir: &Path, config_file: &Path) -> Self {
        let config = model_files::read_regular(config_file, model_files::CONFIG_LIMIT)
            .ok()
            .map(|bytes| Sha256::digest(bytes).into());
        let versions = versions::numeric_subdirectories(model_dir)
            .unwrap_or_default()
            .into_iter()
            .map(|version| (version, content_hash::tree(&model_dir.join(version.to_string()))))
            .collect();
        Fingerprint { config, versions }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_with_content_and_versions_not_with_timestamps() {
        let dir = std::env::temp_dir().join(format!("tessera-fingerprint-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("1")).unwrap();
        std::fs::write(dir.join("config.pbtxt"), "a").unwrap();
        std::fs::write(dir.join("1/model.wasm"), "x").unwrap();
        let config = dir.join("config.pbtxt");
        let first = Fingerprint::of(&dir, &config);
        std::fs::write(dir.join("1/model.wasm"), "x").unwrap(); // rewritten, same bytes
        assert_eq!(Fingerprint::of(&dir, &config), first);
        std::fs::write(dir.join("1/model.wasm"), "y").unwrap();
        let changed = Fingerprint::of(&dir, &config);
        assert_ne!(changed.versions[&1], first.versions[&1]);
        assert_eq!(changed.config, first.config);
        std::fs::create_dir_all(dir.join("2")).unwrap();
        assert_eq!(Fingerprint::of(&dir, &config).versions.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        std::fs::write(&config, "b").unwrap();
        assert_ne!(Fingerprint::of(&dir, &config).config, first.config);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
