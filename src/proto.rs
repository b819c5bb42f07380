//! The generated protobuf code (see build.rs) and the descriptor pool that prost-reflect needs to parse and
//! print model configurations in protobuf text format and JSON.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

/// Triton's `inference` package: the gRPC service, its messages, and `ModelConfig`.
pub mod inference {
    tonic::include_proto!("inference");
}

/// The standard gRPC health protocol.
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}

static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

/// All message descriptors compiled from `proto/`, decoded once.
pub fn descriptor_pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(DESCRIPTORS).expect("descriptor set built by build.rs is valid"))
}

/// The descriptor of `inference.ModelConfig`.
pub fn model_config_descriptor() -> MessageDescriptor {
    descriptor_pool()
        .get_message_by_name("inference.ModelConfig")
        .expect("model_config.proto defines inference.ModelConfig")
}
