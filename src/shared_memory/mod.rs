//! Triton's shared memory extension: the regions clients register, and the inputs read from and outputs
//! written into them. System shared memory is POSIX shm objects (`region`); CUDA shared memory has its
//! routes, as in Triton's CPU build, but no region can be registered without a GPU.
//!
//! As in Triton ≥ 2.69, client shared memory is off unless the server was started with
//! `--allow-client-shm=true`: register and unregister then answer UNSUPPORTED (501 / UNIMPLEMENTED) with
//! Triton's message, and status lists nothing. Keys are checked as Triton checks them: not all slashes,
//! and not Triton's reserved prefix for the python backend's own regions.

mod region;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::error::{Error, Result};
pub use region::OutputPlace;
use region::Region;

const DISABLED: &str = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";

/// The prefix Triton reserves for shm keys it creates itself.
const RESERVED_PREFIX: &str = "triton_python_backend_shm_region_";

/// What status reports of one system region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// The registered regions, by name.
pub struct SharedMemory {
    allowed: bool,
    regions: Mutex<BTreeMap<String, Arc<Region>>>,
}

impl SharedMemory {
    /// `allowed`: whether clients may register regions (`--allow-client-shm`).
    pub fn new(allowed: bool) -> Self {
        SharedMemory { allowed, regions: Mutex::new(BTreeMap::new()) }
    }

    fn regions(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Region>>> {
        self.regions.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check_allowed(&self) -> Result<()> {
        match self.allowed {
            true => Ok(()),
            false => Err(Error::Unimplemented(DISABLED.into())),
        }
    }

    /// Maps `byte_size` bytes of the shm object `key` from `offset` as region `name`.
    pub fn register_system(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> Result<()> {
        self.check_allowed()?;
        if name.is_empty() {
            return Err(Error::invalid("'region name' is necessary to register system shared memory region"));
        }
        check_key(name, key)?;
        if self.regions().contains_key(name) {
            return Err(already_registered(name));
        }
        // Opened and mapped outside the lock: a slow shm object must not hold up other requests.
        let region = Arc::new(Region::open(name, key, offset, byte_size)?);
        match self.regions().entry(name.to_string()) {
            std::collections::btree_map::Entry::Occupied(_) => Err(already_registered(name)),
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(region);
                Ok(())
            }
        }
    }

    /// Forgets region `name` (every region for an empty name; an unknown name is not an error, as in
    /// Triton). Requests using a region keep it mapped until they end.
    pub fn unregister_system(&self, name: &str) -> Result<()> {
        self.check_allowed()?;
        let mut regions = self.regions();
        match name {
            "" => regions.clear(),
            name => drop(regions.remove(name)),
        }
        Ok(())
    }

    /// Every region (empty `name`) or the one named.
    pub fn system_status(&self, name: &str) -> Result<Vec<RegionStatus>> {
        let regions = self.regions();
        let status = |region: &Region| RegionStatus {
            name: region.name.clone(),
            key: region.key.clone(),
            offset: region.offset,
            byte_size: region.byte_size,
        };
        match name {
            "" => Ok(regions.values().map(|region| status(region)).collect()),
            name => match regions.get(name) {
                Some(region) => Ok(vec![status(region)]),
                None => Err(Error::NotFound(format!("Unable to find system shared memory region: '{name}'"))),
            },
        }
    }

    /// CUDA regions: none can exist without a GPU. A name registered as system memory says so.
    pub fn cuda_status(&self, name: &str) -> Result<()> {
        match name {
            "" => Ok(()),
            name if self.regions().contains_key(name) => Err(Error::NotFound(format!(
                "The region named '{name}' is registered as system shared memory, not CUDA shared memory"
            ))),
            name => Err(Error::NotFound(format!("Unable to find cuda shared memory region: '{name}'"))),
        }
    }

    /// Registering a CUDA region fails as in Triton's CPU build.
    pub fn register_cuda(&self, name: &str) -> Result<()> {
        self.check_allowed()?;
        if name.is_empty() {
            return Err(Error::invalid("'region name' is necessary to register cuda shared memory region"));
        }
        Err(Error::invalid(format!("failed to register CUDA shared memory region: '{name}', GPUs not supported")))
    }

    /// Unregistering CUDA regions succeeds: there are none.
    pub fn unregister_cuda(&self) -> Result<()> {
        self.check_allowed()
    }

    fn region(&self, name: &str) -> Result<Arc<Region>> {
        self.regions()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("Unable to find shared memory region: '{name}'")))
    }

    /// An input's bytes from the region `reference` names, without a copy.
    pub fn input(&self, reference: &ShmReference) -> Result<Bytes> {
        self.region(&reference.region)?.input(reference.offset, reference.byte_size)
    }

    /// Where a requested output goes in the region `reference` names, checked before the model runs.
    pub fn output(&self, reference: &ShmReference) -> Result<OutputPlace> {
        self.region(&reference.region)?.output(reference.offset, reference.byte_size)
    }
}

fn already_registered(name: &str) -> Error {
    Error::AlreadyExists(format!("shared memory region '{name}' already in manager"))
}

/// Triton's key checks: a key of only slashes names nothing, and Triton's reserved prefix (after any
/// leading slashes) is refused so that a client cannot map the python backend's own regions.
fn check_key(name: &str, key: &str) -> Result<()> {
    let unslashed = key.trim_start_matches('/');
    if unslashed.is_empty() {
        return Err(Error::invalid(format!("cannot register shared memory region '{name}' - invalid shm key '{key}'")));
    }
    if unslashed.starts_with(RESERVED_PREFIX) {
        return Err(Error::invalid(format!(
            "cannot register shared memory region '{name}' with key '{key}' as the key contains the reserved prefix '{RESERVED_PREFIX}'"
        )));
    }
    Ok(())
}

/// Where a tensor's data lives when it is in shared memory: the three parameters Triton reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShmReference {
    pub region: String,
    pub offset: u64,
    pub byte_size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_as_triton_checks_them() {
        assert!(check_key("r", "/").unwrap_err().to_string().contains("invalid shm key '/'"));
        assert!(check_key("r", "").is_err());
        let reserved = check_key("r", "//triton_python_backend_shm_region_1").unwrap_err().to_string();
        assert!(reserved.contains("reserved prefix"), "{reserved}");
        assert!(check_key("r", "/input_simple").is_ok());
    }

    #[test]
    fn while_disabled_nothing_registers_and_status_is_empty() {
        let shm = SharedMemory::new(false);
        let refused = shm.register_system("r", "/k", 0, 8).unwrap_err();
        assert!(matches!(refused, Error::Unimplemented(_)) && refused.to_string().contains("--allow-client-shm=true"));
        assert!(matches!(shm.unregister_system(""), Err(Error::Unimplemented(_))));
        assert!(matches!(shm.register_cuda("r"), Err(Error::Unimplemented(_))));
        assert_eq!(shm.system_status("").unwrap(), vec![]);
        assert!(shm.cuda_status("").is_ok());
    }
}
