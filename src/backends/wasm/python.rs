//! Python models (`backend: "python"`, `<version>/model.py` defining `TritonPythonModel`) run on Tessera's
//! Python runtime: one Wasm component (CPython 3.14, numpy and Triton's `triton_python_backend_utils`, built
//! by `scripts/python_runtime.sh`) that imports the model's `model.py` from the model's directory inside the
//! sandbox when an instance starts, as Triton's stub process does. Every Python model is that one component,
//! so it is compiled once (and cached like any plugin), a new or changed `model.py` costs an import, and
//! serving needs no tool.
//!
//! The runtime is a directory holding `runtime.wasm` and CPython's standard library (`lib/python3.14`), which
//! is mounted read-only into each Python model's sandbox where CPython looks for it. It is found with
//! `--backend-config=python,runtime-dir=DIR`, else in `.cache/python` of an ancestor of the server's
//! executable, where setup builds it; without it, Python models fail to load saying so and nothing else is
//! affected.

use std::path::{Path, PathBuf};

use super::sandbox::Mount;
use crate::error::LoadResult;
use crate::model_config::{self, ModelConfig};
use crate::model_files;

/// The component, inside the runtime directory.
const COMPONENT: &str = "runtime.wasm";
/// The standard library, inside the runtime directory and inside the sandbox (where componentize-py had it
/// when it built the component, so the interpreter's import paths point there).
const STDLIB: &str = "lib/python3.14";
const GUEST_STDLIB: &str = "/python";

pub struct PythonRuntime {
    /// The runtime directory, when one was named or found.
    dir: Option<PathBuf>,
}

impl PythonRuntime {
    /// `configured`: `--backend-config=python,runtime-dir=DIR`.
    pub fn new(configured: Option<PathBuf>) -> Self {
        // Setup builds the runtime into .cache/python.
        let built = || {
            crate::backends::setup_cache_file(&format!("python/{COMPONENT}"))
                .and_then(|c| c.parent().map(Path::to_path_buf))
        };
        PythonRuntime { dir: configured.or_else(built) }
    }

    /// The runtime component for the Python model in `version_dir`, and what its sandbox mounts besides the
    /// model's own directories: the standard library. Fails when the model's file or the runtime is missing.
    pub fn component(&self, version_dir: &Path, config: &ModelConfig) -> LoadResult<(PathBuf, Vec<Mount>)> {
        let file = model_file(config);
        if file.strip_suffix(".py").is_none_or(|module| module.is_empty() || module.contains(['/', '.'])) {
            return Err(format!(
                "default_model_filename '{file}' must name a Python file (module.py) for backend 'python'"
            )
            .into());
        }
        if !model_files::is_regular_file(&version_dir.join(file)) {
            return Err(format!("{} is missing", version_dir.join(file).display()).into());
        }
        let Some(dir) = &self.dir else {
            return Err("backend 'python' runs models on Tessera's Python runtime, which was not found: build it \
                        with `scripts/dev setup` (it goes to .cache/python) or name its directory with \
                        --backend-config=python,runtime-dir=DIR"
                .to_string()
                .into());
        };
        let component = dir.join(COMPONENT);
        let stdlib = dir.join(STDLIB);
        if !component.is_file() || !stdlib.is_dir() {
            return Err(format!(
                "the Python runtime directory {} lacks {COMPONENT} or {STDLIB}: rebuild it with `scripts/dev setup`",
                dir.display()
            )
            .into());
        }
        Ok((component, vec![Mount { host: stdlib, guest: GUEST_STDLIB.into() }]))
    }
}

/// The model's file in a version directory: `default_model_filename`, else `model.py`.
fn model_file(config: &ModelConfig) -> &str {
    model_config::model_file_name(config, "model.py")
}
