//! The files of model repositories, read as untrusted input. A model name comes from clients (the
//! repository API) and is only ever a name, never a path. A file a model names is a plain file name inside
//! its version directory. Only regular files are read: a FIFO would block the reading thread forever and a
//! device such as `/dev/zero` never ends, so files are opened without blocking, checked with `fstat`, and
//! read up to a size limit. Directory walks list regular files only and never follow a link to a
//! directory, so a symlink loop cannot make them run forever.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// The most a model's configuration file may hold.
pub const CONFIG_LIMIT: u64 = 16 << 20;

/// The most a plugin component may hold (a Python model with numpy is about 45 MB).
pub const PLUGIN_LIMIT: u64 = 1 << 30;

/// Checks that `name` (from a client) names a model and cannot be read as a path: not empty, no `/`, `\`
/// or NUL, and not `.` or `..`. Triton refuses `/` and `..`; the rest can reach outside a directory too.
pub fn check_model_name(name: &str) -> Result<(), String> {
    let trimmed = name.trim();
    if trimmed.is_empty() {
        return Err("Model name cannot be empty. Please enter a valid name to deploy.".into());
    }
    if trimmed == "." || trimmed == ".." || name.contains(['/', '\\', '\0']) {
        return Err(format!("invalid model name '{name}', model name must not contain path traversal characters"));
    }
    Ok(())
}

/// Checks that `name` is one plain file name (what `default_model_filename` may hold), so that joining it
/// to a version directory stays inside that directory.
pub fn check_file_name(name: &str, what: &str) -> Result<(), String> {
    let mut components = Path::new(name).components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(_)), None) if !name.contains(['/', '\\', '\0']) => Ok(()),
        _ => Err(format!("{what} '{name}' must be a file name inside the version directory, not a path")),
    }
}

/// `relative` joined to `root`, refused unless it still lies inside `root` once every link is resolved
/// (as Triton checks label files). The file itself need not exist yet.
pub fn resolve_inside(root: &Path, relative: &Path) -> Result<PathBuf, String> {
    let root = root.canonicalize().map_err(|e| format!("cannot resolve {}: {e}", root.display()))?;
    let joined = root.join(relative);
    // The deepest ancestor that exists is resolved; what follows it cannot be a link yet.
    let existing = joined.ancestors().find(|a| a.symlink_metadata().is_ok()).unwrap_or(&root);
    let mut resolved = existing.canonicalize().map_err(|e| format!("cannot resolve {}: {e}", existing.display()))?;
    // Joined only when something follows: joining an empty path would add a trailing slash.
    let rest = joined.strip_prefix(existing).unwrap_or(Path::new(""));
    if !rest.as_os_str().is_empty() {
        resolved = resolved.join(rest);
    }
    let escapes = resolved.components().any(|c| c == Component::ParentDir) || !resolved.starts_with(&root);
    if escapes {
        return Err(format!("'{}' is outside {}", relative.display(), root.display()));
    }
    Ok(resolved)
}

/// Opens `path` for reading if it is a regular file (links followed), without ever blocking: a FIFO is
/// opened non-blocking and then refused like any other special file. Returns the file and its size.
pub fn open_regular(path: &Path) -> std::io::Result<(File, u64)> {
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    Ok((file, metadata.len()))
}

/// The whole of the regular file at `path`, refused when larger than `limit` bytes. Errors name the file.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let (file, size) =
        open_regular(path).map_err(|e| ReadError::Io(format!("{}: cannot read: {e}", path.display()), e.kind()))?;
    if size > limit {
        return Err(ReadError::TooLarge(format!(
            "{}: holds {size} bytes, more than the limit of {limit}",
            path.display()
        )));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    // The size can change while it is read: never read past the limit whatever the file does meanwhile.
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ReadError::Io(format!("{}: cannot read: {e}", path.display()), e.kind()))?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge(format!(
            "{}: grew past the limit of {limit} bytes while it was read",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Why `read_regular` failed, with a message naming the file.
#[derive(Debug)]
pub enum ReadError {
    Io(String, std::io::ErrorKind),
    TooLarge(String),
}

impl ReadError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io(_, std::io::ErrorKind::NotFound))
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(message, _) | ReadError::TooLarge(message) => f.write_str(message),
        }
    }
}

/// Whether `path` is a regular file (links followed); FIFOs, devices and sockets are not.
pub fn is_regular_file(path: &Path) -> bool {
    path.metadata().is_ok_and(|m| m.is_file())
}

/// The paths, relative to `root`, of every regular file below `dir` (a link to a regular file counts).
/// Directories are entered only when they are real directories, never through a link.
pub fn regular_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().filter_map(|e| e.ok()) {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            regular_files(root, &path, out);
        } else if kind.is_file() || (kind.is_symlink() && is_regular_file(&path)) {
            if let Some(relative) = path.strip_prefix(root).ok().and_then(|p| p.to_str()) {
                out.push(relative.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-model-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn model_names_are_names() {
        for good in ["simple", "a.b", "model-1", "..a", "a..b"] {
            assert!(check_model_name(good).is_ok(), "{good}");
        }
        for bad in ["", "  ", ".", "..", " .. ", "a/b", "../x", "/etc", "a\\b", "a\0b"] {
            assert!(check_model_name(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn file_names_are_one_component() {
        assert!(check_file_name("model.onnx", "f").is_ok());
        for bad in ["", ".", "..", "a/b", "/etc/passwd", "../model.wasm", "a\\b"] {
            assert!(check_file_name(bad, "f").is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn resolving_refuses_links_and_dots_that_leave_the_root() {
        let dir = scratch("resolve");
        std::fs::create_dir_all(dir.join("root/1")).unwrap();
        std::os::unix::fs::symlink("/etc", dir.join("root/1/out")).unwrap();
        std::os::unix::fs::symlink("../1", dir.join("root/1/in")).unwrap();
        let root = dir.join("root");
        assert!(resolve_inside(&root, Path::new("1/new/file")).is_ok());
        assert!(resolve_inside(&root, Path::new("1/in/file")).is_ok());
        let existing = resolve_inside(&root, Path::new("1")).unwrap();
        assert!(existing.is_dir() && !existing.to_string_lossy().ends_with('/'));
        assert!(resolve_inside(&root, Path::new("1/out/passwd")).is_err());
        assert!(resolve_inside(&root, Path::new("1/../../x")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn special_files_are_refused_without_blocking() {
        let dir = scratch("special");
        let fifo = dir.join("fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero")).unwrap();
        std::fs::write(dir.join("big"), vec![0; 100]).unwrap();
        assert!(read_regular(&fifo, 10).is_err());
        assert!(read_regular(&dir.join("zero"), 10).is_err());
        assert!(matches!(read_regular(&dir.join("big"), 10), Err(ReadError::TooLarge(_))));
        assert_eq!(read_regular(&dir.join("big"), 100).unwrap().len(), 100);
        assert!(read_regular(&dir.join("absent"), 10).unwrap_err().is_not_found());
        let mut files = Vec::new();
        regular_files(&dir, &dir, &mut files);
        assert_eq!(files, vec!["big".to_string()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn walks_do_not_follow_directory_links() {
        let dir = scratch("walk");
        std::fs::create_dir_all(dir.join("a")).unwrap();
        std::fs::write(dir.join("a/f"), b"x").unwrap();
        std::os::unix::fs::symlink(&dir, dir.join("a/loop")).unwrap();
        std::os::unix::fs::symlink("f", dir.join("a/g")).unwrap();
        let mut files = Vec::new();
        regular_files(&dir, &dir, &mut files);
        files.sort();
        assert_eq!(files, vec!["a/f".to_string(), "a/g".to_string()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
