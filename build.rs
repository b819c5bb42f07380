//! Compiles the wire protobufs in `proto/` into Rust (prost messages, tonic server traits) and writes their
//! descriptor set, which `model_config` uses to parse config.pbtxt through prost-reflect. `protoc` comes
//! from `protoc-bin-vendored`, so a fresh machine needs no system package.

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY (edition 2021: set_var is safe): build scripts are single-threaded.
    env::set_var("PROTOC", protoc);
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .build_client(false)
        // Tensor payloads decode as `bytes::Bytes` slices of the request buffer instead of fresh Vecs.
        .bytes(".inference.ModelInferRequest")
        .bytes(".inference.ModelInferResponse")
        .bytes(".inference.InferTensorContents")
        .file_descriptor_set_path(out_dir.join("descriptors.bin"))
        .compile_protos(&["proto/grpc_service.proto", "proto/model_config.proto", "proto/health.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
