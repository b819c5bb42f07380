//! Content hashes of directory trees: every regular file's relative path, size and bytes, in path order. Used where
//! "has this changed?" must not depend on modification times (repository polling).

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::model_files;

pub type Hash = [u8; 32];

/// A hash over every regular file below `dir`, in path order (see `model_files::regular_files`).
pub fn tree(dir: &Path) -> Hash {
    let mut files = Vec::new();
    model_files::regular_files(dir, dir, &mut files);
    files.sort();
    let mut hasher = Sha256::new();
    for relative in files {
        hasher.update(relative.as_bytes());
        hasher.update([0]);
        if let Ok((mut file, _)) = model_files::open_regular(&dir.join(&relative)) {
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
