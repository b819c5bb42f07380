//! Compiles `shim.cpp` against the libtorch in `LIBTORCH` (the one `tch` links), as `tch`'s own build compiles
//! its wrappers (C++17, the C++11 ABI), and records that library directory as the library's run-time path, so
//! the server's `dlopen` finds libtorch without LD_LIBRARY_PATH.

use std::env;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-changed=shim.cpp");
    let libtorch =
        PathBuf::from(env::var("LIBTORCH").map_err(|_| "LIBTORCH is not set (scripts/dev setup assembles libtorch)")?);
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(libtorch.join("include"))
        .include(libtorch.join("include/torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        .file("shim.cpp")
        .compile("tessera_torch_shim");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", libtorch.join("lib").display());
    Ok(())
}
