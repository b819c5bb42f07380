//! `grpc.health.v1.Health`: SERVING while the server is ready, NOT_SERVING otherwise, for any service name
//! (the empty name, or `inference.GRPCInferenceService`), so Kubernetes gRPC probes work out of the box.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::proto::health::health_check_response::ServingStatus;
use crate::proto::health::health_server::{Health, HealthServer};
use crate::proto::health::{HealthCheckRequest, HealthCheckResponse};
use crate::service::Service;

pub fn server(service: Arc<Service>) -> HealthServer<HealthService> {
    HealthServer::new(HealthService { service })
}

pub struct HealthService {
    service: Arc<Service>,
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(&self, _: Request<HealthCheckRequest>) -> Result<Response<HealthCheckResponse>, Status> {
        let status = if self.service.is_ready() { ServingStatus::Serving } else { ServingStatus::NotServing };
        Ok(Response::new(HealthCheckResponse { status: status as i32 }))
    }

    type WatchStream = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(&self, _: Request<HealthCheckRequest>) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("Health/Watch is not implemented by this server yet; use Health/Check"))
    }
}
