//! What a repository load request may supply instead of the repository's own files: a JSON configuration,
//! and model files (`file:<version>/<name>` parameters). Supplied files are written to a private scratch
//! directory of the server's own, never into the user's repository, and the directory is removed once no
//! loaded model uses it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::model_files;

/// The longest file name Linux file systems hold, in bytes.
const NAME_MAX: usize = 255;

/// The overrides of one load request.
#[derive(Default)]
pub struct LoadOverrides {
    /// A JSON `ModelConfig` that replaces the model's config file.
    pub config: Option<String>,
    /// Model files by path relative to the model directory (`1/model.onnx`).
    pub files: Vec<(String, Bytes)>,
}

impl LoadOverrides {
    /// Checks what the request supplied before anything is loaded: files need a config, every file path
    /// must stay inside a version directory of the model, and the config must be JSON of a model config.
    pub fn check(&self) -> Result<()> {
        if !self.files.is_empty() && self.config.is_none() {
            return Err(Error::invalid("model files were supplied without a 'config' parameter, which they require"));
        }
        for (path, _) in &self.files {
            // Triton answers a name the file system cannot hold with INTERNAL "failed to poll from model
            // repository", and its model-control example checks for both.
            if path.split('/').any(|component| component.len() > NAME_MAX) {
                return Err(Error::internal(format!(
                    "failed to poll from model repository: the supplied file 'file:{path}' has a name longer than {NAME_MAX} bytes"
                )));
            }
            relative_path(path)?;
        }
        if let Some(config) = &self.config {
            crate::model_config::parse_json(config, "the 'config' parameter")
                .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        }
        Ok(())
    }
}

/// A private directory holding a model's supplied files, removed when dropped. It is made by `tempfile`: a
/// name no one can guess, created anew (never a directory or symlink someone planted at that name), that
/// only the server's user can enter.
#[derive(Debug)]
pub struct ScratchDir {
    dir: tempfile::TempDir,
}

impl ScratchDir {
    /// Writes `files` under a new private directory; returns it and the model directory inside it.
    pub fn create(model: &str, files: &[(String, Bytes)]) -> Result<(ScratchDir, PathBuf)> {
        model_files::check_model_name(model).map_err(Error::InvalidArgument)?;
        let store_failed = |path: &str, e: &dyn std::fmt::Display| {
            Error::internal(format!("cannot store the supplied file '{path}': {e}"))
        };
        let dir = tempfile::Builder::new()
            .prefix("tessera-load-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|e| store_failed(model, &e))?;
        let model_dir = dir.path().join(model);
        std::fs::create_dir(&model_dir).map_err(|e| store_failed(model, &e))?;
        for (path, content) in files {
            // The path was checked as text; resolving it as well keeps every write inside the model
            // directory whatever the directory holds.
            let target =
                model_files::resolve_inside(&model_dir, relative_path(path)?).map_err(Error::InvalidArgument)?;
            let written =
                target.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|_| std::fs::write(&target, content));
            written.map_err(|e| store_failed(path, &e))?;
        }
        Ok((ScratchDir { dir }, model_dir))
    }

    /// The directory that holds the model directory.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
}

/// A supplied file's path, if it is `<version>/<name...>` with nothing that leaves the model directory, and
/// names a file (no trailing `/`).
fn relative_path(path: &str) -> Result<&Path> {
    let candidate = Path::new(path);
    let bad = || {
        Error::invalid(format!(
            "supplied file 'file:{path}' must be named <version>/<file>, inside the model directory"
        ))
    };
    if path.ends_with('/') {
        return Err(bad());
    }
    let mut components = candidate.components();
    match components.next() {
        Some(Component::Normal(version)) if version.to_str().is_some_and(|v| v.parse::<u64>().is_ok()) => {}
        _ => return Err(bad()),
    }
    if !components.clone().all(|c| matches!(c, Component::Normal(_))) || components.next().is_none() {
        return Err(bad());
    }
    Ok(candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_paths_must_stay_inside_a_version_directory() {
        assert!(relative_path("1/model.onnx").is_ok());
        assert!(relative_path("3/sub/weights.bin").is_ok());
        for bad in ["model.onnx", "1", "../1/x", "1/../../x", "/1/x", "v1/x", "", "1/x/"] {
            assert!(relative_path(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn supplied_files_live_in_a_scratch_directory_removed_on_drop() {
        let (scratch, model_dir) =
            ScratchDir::create("m", &[("1/model.wasm".into(), Bytes::from_static(b"abc"))]).unwrap();
        assert_eq!(std::fs::read(model_dir.join("1/model.wasm")).unwrap(), b"abc");
        let root = scratch.root().to_path_buf();
        assert_eq!(std::fs::metadata(&root).unwrap().permissions().mode() & 0o777, 0o700);
        drop(scratch);
        assert!(!root.exists());
    }
}
