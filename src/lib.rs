//! Tessera: an inference server that speaks Triton's protocols (KServe v2 over HTTP and gRPC, with Triton's
//! extensions), reads Triton model repositories, and runs custom model code as sandboxed WebAssembly
//! components.
//!
//! # Layout
//!
//! - `frontends` translate the wire (`http`, `grpc`, `metrics`) and call `service`, the one API both
//!   protocols share;
//! - `repository` holds the model table and changes it (model control: load, reload, unload, poll);
//! - `scheduler` runs each model version's requests: checks, queue, dynamic batching, statistics;
//! - `backends` execute: `wasm` (the plugin host, Python models) and `onnx`;
//! - `shared_memory` holds the regions clients register, where tensors are read from and written to;
//! - `executor` is how all of them use the runtime's threads; `observability` records logs, statistics and
//!   metrics below the scheduler; `server` starts and stops the whole.
//!
//! # The life of a request
//!
//! A connection accepted by `executor::connections` → the frontend decodes one `InferenceRequest` (tensor
//! bytes stay slices of the request buffer) → `Service::infer` → the repository leases the model version →
//! its `Scheduler` checks the request against the signature and runs it (directly on an idle instance, or
//! batched) in the caller's task → the `Instance` executes (a Wasm plugin call, or ONNX Runtime on the
//! instance's thread) → the scheduler selects and checks the outputs and records statistics → the frontend
//! encodes the response once. `docs/design.md` tells the same story with the tensor copies and the error
//! mapping.

pub mod backends;
pub mod cli;
pub(crate) mod content_hash;
pub mod error;
pub mod executor;
pub mod frontends;
#[doc(hidden)]
pub mod fuzzing;
pub mod inference;
pub mod model_config;
pub(crate) mod model_files;
pub mod observability;
pub mod proto;
pub mod repository;
pub mod scheduler;
pub mod server;
pub mod service;
pub mod shared_memory;
pub mod tensor;

pub use error::{Error, Result};
