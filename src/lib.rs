//! Tessera: an inference server that speaks Triton's protocols (KServe v2 over HTTP and gRPC, with Triton's
//! extensions), reads Triton model repositories, and runs custom model code as sandboxed WebAssembly
//! components. The module map follows `DESIGN.md`: frontends translate wire formats, the repository decides
//! what is loaded, the scheduler moves requests to backend instances, backends execute.

pub mod backends;
pub mod cli;
pub(crate) mod content_hash;
pub mod error;
pub mod executor;
pub mod frontends;
pub mod inference;
pub mod model_config;
pub(crate) mod model_files;
pub mod observability;
pub mod proto;
pub mod repository;
pub(crate) mod scheduler;
pub mod server;
pub mod service;
pub mod tensor;

pub use error::{Error, Result};
