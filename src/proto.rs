//! The generated protobuf code (see build.rs) and the descriptor pool that prost-reflect needs to parse and
//! print model configurations in protobuf text format and JSON.

use std::sync::OnceLock;

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};

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
    message_descriptor("inference.ModelConfig")
}

fn message_descriptor(full_name: &str) -> MessageDescriptor {
    descriptor_pool().get_message_by_name(full_name).unwrap_or_else(|| panic!("proto/ defines {full_name}"))
}

/// A message as Triton's HTTP endpoints render it: protobuf's JSON mapping with the original field names,
/// every field printed (defaults included), enums by name and 64-bit integers as numbers.
pub fn to_triton_json<M: Message>(message: &M, full_name: &str) -> serde_json::Value {
    let dynamic = DynamicMessage::decode(message_descriptor(full_name), message.encode_to_vec().as_slice())
        .expect("a message always decodes against its own descriptor");
    let options =
        SerializeOptions::new().skip_default_fields(false).use_proto_field_name(true).stringify_64_bit_integers(false);
    dynamic
        .serialize_with_options(serde_json::value::Serializer, &options)
        .expect("protobuf JSON serialisation cannot fail")
}
