//! The wire: HTTP/REST (axum) and gRPC (tonic), both speaking KServe v2 with Triton's extensions. Frontends
//! only translate: they decode a request once, hand it to the repository's model, and encode the answer
//! once. They hold no model state of their own. What both protocols report about the server (metadata,
//! liveness, readiness) is computed in `server::ServerContext` so they cannot disagree.

pub mod grpc;
pub mod http;
pub mod metrics;
