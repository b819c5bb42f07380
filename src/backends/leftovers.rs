//! What a process killed mid-write leaves in a cache directory shared between servers: temporary files and
//! build directories whose names carry the writer's process id (`<prefix><pid>-…`). Each server sweeps, at
//! start-up, the ones whose writer no longer runs, and leaves a running server's alone.

use std::path::Path;

/// Removes the entries of `dir` named `<prefix><pid>-…` whose process `pid` is gone.
pub fn sweep(dir: &Path, prefix: &str) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().filter_map(|e| e.ok()) {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| writer_of(n, prefix)) else { continue };
        if process_runs(pid) {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Ok(()) => {
                tracing::info!(path = %path.display(), "removed what an earlier server (pid {pid}) left unfinished")
            }
            Err(e) => tracing::warn!(path = %path.display(), "cannot remove an unfinished cache entry: {e}"),
        }
    }
}

/// The name a writer gives its temporary entry: `<prefix><pid>-<rest>`.
pub fn name(prefix: &str, rest: &str) -> String {
    format!("{prefix}{}-{rest}", std::process::id())
}

fn writer_of(name: &str, prefix: &str) -> Option<u32> {
    name.strip_prefix(prefix)?.split_once('-')?.0.parse().ok()
}

fn process_runs(pid: u32) -> bool {
    pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_only_what_dead_writers_left() {
        let dir = std::env::temp_dir().join(format!("tessera-leftovers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Process ids above the kernel's maximum (4194304) cannot be running.
        let dead = dir.join(".tmp-4194999-0-x.cwasm");
        let dead_build = dir.join("build-4194999-3");
        let mine = dir.join(name(".tmp-", "1-x.cwasm"));
        let other = dir.join("abc.cwasm");
        std::fs::write(&dead, b"half").unwrap();
        std::fs::create_dir_all(dead_build.join("src")).unwrap();
        std::fs::write(&mine, b"being written").unwrap();
        std::fs::write(&other, b"done").unwrap();
        sweep(&dir, ".tmp-");
        sweep(&dir, "build-");
        assert!(!dead.exists() && !dead_build.exists());
        assert!(mine.exists() && other.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
