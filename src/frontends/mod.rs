//! The wire: HTTP/REST (axum) and gRPC (tonic), both speaking KServe v2 with Triton's extensions, and the
//! Prometheus endpoint. Frontends only translate: they decode a request once, call the `service::Service`
//! operation it asks for, and encode the answer once. They hold no model state of their own, and everything
//! both protocols report is computed by the service, so they cannot disagree.

pub mod grpc;
pub mod http;
pub(crate) mod metrics;
pub mod restricted;
pub(crate) mod traced;
