//! Content hashes of directory trees: every file's relative path, size and bytes, in path order. Used where
//! "has this changed?" must not depend on modification times (repository polling, the Python build cache).

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

pub type Hash = [u8; 32];

/// A hash over every file below `dir`, in path order.
pub fn tree(dir: &Path) -> Hash {
    let mut files = Vec::new();
    collect_files(dir, dir, &mut files);
    files.sort();
    let mut hasher = Sha256::new();
    for relative in files {
        hasher.update(relative.as_bytes());
        hasher.update([0]);
        if let Ok(mut file) = std::fs::File::open(dir.join(&relative)) {
            let mut buffer = vec![0; 1 << 16];
            let mut size = 0u64;
            while let Ok(n) = file.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                size += n as u64;
                hasher.update(&buffer[..n]);
            }
            hasher.update(size.to_le_bytes());
        }
    }
    hasher.finalize().into()
}

/// The paths of every file below `dir`, relative to `root`.
pub fn collect_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().filter_map(|e| e.ok()) {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => collect_files(root, &path, out),
            Ok(_) => {
                if let Some(relative) = path.strip_prefix(root).ok().and_then(|p| p.to_str()) {
                    out.push(relative.to_string());
                }
            }
            Err(_) => {}
        }
    }
}
