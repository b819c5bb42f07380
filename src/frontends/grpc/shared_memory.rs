//! The shared memory extension's gRPC messages: region status as Triton's map by name.

use std::collections::HashMap;

use crate::proto::inference::system_shared_memory_status_response::RegionStatus as Status;
use crate::proto::inference::SystemSharedMemoryStatusResponse;
use crate::shared_memory::RegionStatus;

pub fn status_response(regions: Vec<RegionStatus>) -> SystemSharedMemoryStatusResponse {
    let regions: HashMap<String, Status> = regions
        .into_iter()
        .map(|r| (r.name.clone(), Status { name: r.name, key: r.key, offset: r.offset, byte_size: r.byte_size }))
        .collect();
    SystemSharedMemoryStatusResponse { regions }
}
