//! Python models (`backend: "python"`, `<version>/model.py` defining `TritonPythonModel`). Tessera runs
//! them as Wasm plugins: at load, the model's Python files, the `tessera` module (Triton's python-backend
//! API without numpy) and the entry module that adapts `tessera:backend` to `TritonPythonModel` are built
//! into one component with componentize-py, which bundles CPython. Building takes seconds, so components
//! are cached by the hash of everything that goes into them; after that, a load is an ordinary Wasm load
//! (whose compiled code is cached too).
//!
//! The build reads a private copy of the model's `.py` files, so nothing is ever written into the model
//! repository. componentize-py is found with `--backend-config=python,componentize-py=PATH`, else on
//! `PATH`; without it, Python models fail to load saying so and nothing else is affected.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backends::leftovers;
use crate::content_hash;
use crate::error::LoadResult;
use crate::model_config::{self, ModelConfig};
use crate::model_files;

const WIT: &str = include_str!("../../../wit/backend.wit");
const TESSERA_MODULE: &str = include_str!("../../../plugins/python/tessera.py");
const ENTRY_MODULE: &str = include_str!("../../../plugins/python/tessera_app.py");
const TOOL: &str = "componentize-py";

pub struct PythonBuilder {
    /// componentize-py, when found.
    tool: Option<PathBuf>,
    /// Where built components are kept.
    dir: PathBuf,
}

/// Distinguishes the scratch directories of builds running at the same time.
static BUILDS: AtomicU64 = AtomicU64::new(0);

/// Build directories are named `build-<pid>-<n>`; a server killed mid-build leaves one behind.
const BUILD: &str = "build-";

impl PythonBuilder {
    /// `configured`: `--backend-config=python,componentize-py=PATH`. `cache_dir`: the server's cache
    /// (`None`: a directory under the system's temp dir, for this process only).
    pub fn new(configured: Option<PathBuf>, cache_dir: Option<&Path>) -> Self {
        let tool = configured.or_else(|| find_on_path(TOOL));
        let dir = match cache_dir {
            Some(dir) => dir.join("python"),
            None => std::env::temp_dir().join(format!("tessera-python-{}", std::process::id())),
        };
        leftovers::sweep(&dir, BUILD);
        PythonBuilder { tool, dir }
    }

    /// The component of the Python model in `version_dir`, built unless a component of the same sources is
    /// cached. Blocks for the build: call it from a blocking thread.
    pub fn component(&self, version_dir: &Path, config: &ModelConfig) -> LoadResult<PathBuf> {
        let file = model_file(config);
        let module =
            file.strip_suffix(".py").filter(|m| !m.is_empty() && !m.contains(['/', '.'])).ok_or_else(|| {
                format!("default_model_filename '{file}' must name a Python file (module.py) for backend 'python'")
            })?;
        if !version_dir.join(file).is_file() {
            return Err(format!("{} is missing", version_dir.join(file).display()).into());
        }
        let scratch = self.dir.join(leftovers::name(BUILD, &BUILDS.fetch_add(1, Ordering::Relaxed).to_string()));
        let built = self.prepare(&scratch, version_dir, module).and_then(|sources| self.build(&scratch, &sources));
        let _ = std::fs::remove_dir_all(&scratch);
        built
    }

    /// Writes the sources of the component into `scratch`: the WIT, the two modules and a copy of the
    /// model's Python files. Returns the sources directory.
    fn prepare(&self, scratch: &Path, version_dir: &Path, module: &str) -> LoadResult<PathBuf> {
        let sources = scratch.join("src");
        let io = |e: std::io::Error| format!("cannot prepare the Python build in {}: {e}", scratch.display());
        std::fs::create_dir_all(sources.join("wit")).map_err(io)?;
        std::fs::write(sources.join("wit/backend.wit"), WIT).map_err(io)?;
        std::fs::write(sources.join("tessera.py"), TESSERA_MODULE).map_err(io)?;
        let entry = ENTRY_MODULE.replacen("import model as user_model", &format!("import {module} as user_model"), 1);
        std::fs::write(sources.join("tessera_app.py"), entry).map_err(io)?;
        copy_python_files(version_dir, &sources.join("model")).map_err(io)?;
        Ok(sources)
    }

    /// The cached component for `sources`, or a new one built with componentize-py.
    fn build(&self, scratch: &Path, sources: &Path) -> LoadResult<PathBuf> {
        let key = hex::encode(&content_hash::tree(sources)[..16]);
        let component = self.dir.join(format!("{key}.wasm"));
        if component.is_file() {
            return Ok(component);
        }
        let tool = self.tool.as_ref().ok_or_else(|| {
            format!(
                "backend 'python' builds model.py into a component with {TOOL}, which was not found on PATH \
                 (install it with `pip install componentize-py==0.25.1`, or name it with \
                 --backend-config=python,componentize-py=PATH)"
            )
        })?;
        let output = scratch.join("model.wasm");
        let started = std::time::Instant::now();
        let run = Command::new(tool)
            .arg("-d")
            .arg(sources.join("wit"))
            .args(["-w", "backend", "componentize", "tessera_app", "-p"])
            .arg(sources)
            .arg("-p")
            .arg(sources.join("model"))
            .arg("-o")
            .arg(&output)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("RUST_BACKTRACE", "0")
            .env("RUST_LIB_BACKTRACE", "0")
            .die_with_parent()
            .output()
            .map_err(|e| format!("cannot run {}: {e}", tool.display()))?;
        if !run.status.success() {
            return Err(format!("{TOOL} could not build the model: {}", build_error(&run.stderr, &run.stdout)).into());
        }
        std::fs::rename(&output, &component)
            .map_err(|e| format!("cannot keep the built component in {}: {e}", self.dir.display()))?;
        tracing::info!(component = %component.display(), "built a Python model into a component in {:?}", started.elapsed());
        Ok(component)
    }
}

/// A build tool must not outlive the server: killed (even with SIGKILL) mid-build, the server leaves no
/// compiler running.
trait DieWithParent {
    fn die_with_parent(&mut self) -> &mut Self;
}

impl DieWithParent for Command {
    fn die_with_parent(&mut self) -> &mut Self {
        // SAFETY: prctl is async-signal-safe, as a function run between fork and exec must be. The signal
        // comes when the thread that spawned the tool ends, which is after `output()` returns here.
        let server = std::process::id();
        unsafe {
            self.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The server may have died before the signal was asked for.
                if libc::getppid() as u32 != server {
                    return Err(std::io::Error::other("the server exited while starting the build"));
                }
                Ok(())
            })
        }
    }
}

/// The model's file in a version directory: `default_model_filename`, else `model.py`.
pub fn model_file(config: &ModelConfig) -> &str {
    model_config::model_file_name(config, "model.py")
}

/// Copies every `.py` file below `from` (packages included) to the same place below `to`.
fn copy_python_files(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut files = Vec::new();
    model_files::regular_files(from, from, &mut files);
    for relative in files.iter().filter(|f| f.ends_with(".py") && !f.contains("__pycache__")) {
        let target = to.join(relative);
        std::fs::create_dir_all(target.parent().unwrap_or(to))?;
        std::fs::copy(from.join(relative), target)?;
    }
    std::fs::create_dir_all(to)
}

fn find_on_path(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(tool)).find(|path| path.is_file())
}

/// What went wrong in a failed build, in a line: componentize-py ends its report with the Python error
/// after "Caused by:" (e.g. "SyntaxError: invalid syntax (model.py, line 1)"); otherwise the last lines.
fn build_error(stderr: &[u8], stdout: &[u8]) -> String {
    let text = String::from_utf8_lossy(if stderr.is_empty() { stdout } else { stderr });
    let text = text.split("\nStack backtrace:").next().unwrap_or_default();
    let cause = text.rsplit_once("Caused by:").map_or(text, |(_, cause)| cause);
    let lines: Vec<&str> = cause.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines[lines.len().saturating_sub(6)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_error_is_the_python_error_not_the_backtrace() {
        let report = "Traceback (most recent call last):\n  File \"x\", line 8\nAssertionError: Traceback\n\n\nCaused by:\n    SyntaxError: invalid syntax (model.py, line 1)\n\nStack backtrace:\n   0: anyhow\n   1: main\n";
        assert_eq!(build_error(report.as_bytes(), b""), "SyntaxError: invalid syntax (model.py, line 1)");
        assert_eq!(build_error(b"", b"one\ntwo\n"), "one | two");
    }
}
