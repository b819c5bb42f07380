//! One registered system shared memory region: the client's POSIX shm object (`shm_open` of its key),
//! mapped read-write from `offset` for `byte_size` bytes. The mapping lives as long as the last holder:
//! the registry, and every request that reads an input from it or will write an output into it. So a
//! region unregistered while a request uses it stays valid until that request ends, and the memory is
//! unmapped when the last one lets go.
//!
//! Every view into the region is checked against its size first, with overflow in mind, so no request
//! can read or write past the mapping.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::FromRawFd;
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result};

pub struct Region {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    map: MmapRaw,
}

impl Region {
    /// Opens the shm object `key` and maps `byte_size` bytes of it from `offset` (any offset: the mapping
    /// library aligns it to a page), refusing a window that does not lie inside the object.
    pub fn open(name: &str, key: &str, offset: u64, byte_size: u64) -> Result<Region> {
        let invalid = |why: &str| Error::invalid(format!("failed to register shared memory region '{name}': {why}"));
        let file = open_shm(key)?;
        let object_size =
            file.metadata().map_err(|_| Error::invalid(format!("Invalid shared memory region: '{key}'")))?.len();
        match offset.checked_add(byte_size) {
            Some(end) if end <= object_size => {}
            _ => return Err(invalid("invalid args")),
        }
        if byte_size == 0 {
            return Err(invalid("a region must hold at least one byte"));
        }
        let length = usize::try_from(byte_size).map_err(|_| invalid("invalid args"))?;
        let map = MmapOptions::new()
            .offset(offset)
            .len(length)
            .map_raw(&file)
            .map_err(|e| invalid(&format!("unable to process address space: {e}")))?;
        Ok(Region { name: name.to_string(), key: key.to_string(), offset, byte_size, map })
    }

    /// The bytes `[offset, offset + byte_size)` of the region, checked as Triton checks them.
    fn window(&self, offset: u64, byte_size: u64) -> Result<std::ops::Range<usize>> {
        let name = &self.name;
        if offset >= self.byte_size {
            return Err(Error::invalid(format!("Invalid offset for shared memory region: '{name}'")));
        }
        let Some(end) = offset.checked_add(byte_size) else {
            return Err(Error::invalid(format!(
                "Integer overflow detected: byte_size ({byte_size}) + offset ({offset}) exceeds maximum value ({}) for region '{name}'",
                u64::MAX
            )));
        };
        if end > self.byte_size {
            return Err(Error::invalid(format!("Invalid offset + byte size for shared memory region: '{name}'")));
        }
        // Both fit in usize: they are within the mapping's length.
        Ok(offset as usize..end as usize)
    }

    /// An input's bytes: a view of the region, not a copy, that keeps the region mapped while it lives.
    pub fn input(self: &Arc<Self>, offset: u64, byte_size: u64) -> Result<Bytes> {
        let range = self.window(offset, byte_size)?;
        Ok(Bytes::from_owner(View { region: self.clone(), range }))
    }

    /// Where an output of at most `byte_size` bytes goes, checked now (before the model runs).
    pub fn output(self: &Arc<Self>, offset: u64, byte_size: u64) -> Result<OutputPlace> {
        let range = self.window(offset, byte_size)?;
        Ok(OutputPlace { region: self.clone(), range })
    }
}

fn open_shm(key: &str) -> Result<File> {
    let unable = || Error::invalid(format!("Unable to open shared memory region: '{key}'"));
    let c_key = CString::new(key).map_err(|_| unable())?;
    // SAFETY: `c_key` is a valid NUL-terminated string; the descriptor returned is owned by the File.
    let fd = unsafe { libc::shm_open(c_key.as_ptr(), libc::O_RDWR, 0) };
    if fd < 0 {
        return Err(unable());
    }
    // SAFETY: `fd` is a freshly opened descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// An input tensor's bytes inside a region.
struct View {
    region: Arc<Region>,
    range: std::ops::Range<usize>,
}

impl AsRef<[u8]> for View {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the range was checked to lie inside the mapping, which lives as long as `region`. The
        // client may write to its shared memory meanwhile, as with Triton; the bytes are then whatever it
        // wrote, never memory outside the mapping.
        unsafe { std::slice::from_raw_parts(self.region.map.as_ptr().add(self.range.start), self.range.len()) }
    }
}

/// A requested output's place in a region: the region, and the window the request gave.
pub struct OutputPlace {
    region: Arc<Region>,
    range: std::ops::Range<usize>,
}

impl OutputPlace {
    pub fn region_name(&self) -> &str {
        &self.region.name
    }

    /// Copies output `name`'s `data` to the start of the window, refusing data larger than the window.
    pub fn write(&self, name: &str, data: &[u8]) -> Result<()> {
        if data.len() > self.range.len() {
            return Err(Error::invalid(format!(
                "shared memory size specified with the request for output '{name}' ({} bytes) should be at least {} bytes to hold the results",
                self.range.len(),
                data.len()
            )));
        }
        // SAFETY: the window lies inside the mapping (checked when the place was made), which lives as
        // long as `region`, and `data` fits in it. `data` may be a view of this same region (an input passed
        // through unchanged), so the copy allows overlap.
        unsafe { std::ptr::copy(data.as_ptr(), self.region.map.as_mut_ptr().add(self.range.start), data.len()) };
        Ok(())
    }
}
