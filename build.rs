//! Compiles the wire protobufs in `proto/` into Rust (prost messages, tonic server traits) and writes their
//! descriptor set, which `model_config` uses to parse config.pbtxt through prost-reflect. `protoc` comes
//! from `protoc-bin-vendored`, so a fresh machine needs no system package.
//!
//! With the `torch` feature it also compiles the PyTorch backend's C++ shim against the libtorch in
//! `LIBTORCH` (the one `tch` links) and records that library directory as the binary's run-time path.

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
    if env::var_os("CARGO_FEATURE_TORCH").is_some() {
        torch_shim()?;
    }
    Ok(())
}

/// Compiles `src/backends/torch/shim.cpp` as `tch`'s own build compiles its wrappers (C++17, the C++11 ABI).
fn torch_shim() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-changed=src/backends/torch/shim.cpp");
    let libtorch = PathBuf::from(
        env::var("LIBTORCH").map_err(|_| "the torch feature needs LIBTORCH (scripts/dev setup sets it)")?,
    );
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(libtorch.join("include"))
        .include(libtorch.join("include/torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        .file("src/backends/torch/shim.cpp")
        .compile("tessera_torch_shim");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", libtorch.join("lib").display());
    Ok(())
}
