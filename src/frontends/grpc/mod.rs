//! The gRPC frontend: Triton's `inference.GRPCInferenceService` and the standard `grpc.health.v1.Health`,
//! tonic's generated services served by hyper's HTTP/2 on one port. Message size limits match tritonclient's (2 GiB), so
//! large tensors are not refused.
//!
//! The HTTP/2 settings are the ones tonic's `Server` used by default (no limit on concurrent streams, as
//! gRPC's C++ server, Triton's; hyper's 1 MiB windows and 16 KiB frames), plus keep-alive pings that close
//! the connection of a peer that stopped answering. Request bodies reach tonic a whole message at a time
//! (`framing`), so a message prefix that claims much and sends little costs nothing. One thing
//! tonic's `Server` did is not done here: enforcing a call's `grpc-timeout` on the server. The client
//! enforces its own deadline and resets the stream, and that stops the call here.

pub(crate) mod convert;
mod framing;
mod health;
mod logging;
pub(crate) mod repository;
mod shared_memory;
mod stream;
mod trace;

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper_util::rt::TokioTimer;
use hyper_util::service::TowerToHyperService;
use tonic::{Request, Response, Status, Streaming};
use tower::util::MapRequestLayer;
use tower::Layer as _;

use super::restricted::{self, Restrictions};
use super::traced::{self, Arrived, Wire};
use crate::executor::connections::{self, ConnectionLimits, Opening};
use crate::executor::InlineFirst;
use crate::observability::trace::tracer;
use crate::proto::inference::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use crate::proto::inference::*;
use crate::service::{Service, TensorMetadata};

const MAX_MESSAGE: usize = i32::MAX as usize;

/// A connection quiet for this long is pinged; one that does not answer within `KEEP_ALIVE_TIMEOUT` is
/// closed, so a vanished peer does not hold its connection (and its streams' memory) forever. gRPC's own
/// servers ping every two hours; idle clients are common, dead ones should not last that long.
const KEEP_ALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
const KEEP_ALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

pub async fn serve(
    listener: tokio::net::TcpListener,
    service: Arc<Service>,
    limits: ConnectionLimits,
    restrictions: Restrictions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let inference = GrpcInferenceServiceServer::new(GrpcService { service: service.clone() })
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let routes = tonic::service::Routes::new(inference).add_service(health::server(service)).prepare();
    // Without restrictions no layer is added, so that calls pay nothing for the feature.
    let router = match restrictions.is_empty() {
        true => routes.into_axum_router(),
        false => routes
            .into_axum_router()
            .layer(axum::middleware::from_fn_with_state(Arc::new(restrictions), refuse_restricted)),
    };
    let router = MapRequestLayer::new(whole_messages).layer(router);
    let service = TowerToHyperService::new(traced::layer().layer(router));
    let mut builder = http2::Builder::new(InlineFirst);
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(None)
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
    connections::serve(listener, "gRPC", Opening::Http2Preface, limits, shutdown, move |io| {
        builder.serve_connection(io, service.clone())
    })
    .await;
}

/// A call's request body, handed to tonic a whole message at a time (see `framing`).
fn whole_messages(request: axum::http::Request<Incoming>) -> axum::http::Request<framing::WholeMessages<Incoming>> {
    request.map(|body| framing::WholeMessages::new(body, MAX_MESSAGE))
}

/// Answers UNAVAILABLE to a call of a restricted category without its header (Triton's message).
async fn refuse_restricted(
    axum::extract::State(restrictions): axum::extract::State<Arc<Restrictions>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let category = restricted::grpc_category(request.uri().path());
    match category.map(|category| restrictions.check(category, request.headers())) {
        Some(Err(header)) => {
            Status::unavailable(format!("This protocol is restricted, expecting header '{header}'")).into_http()
        }
        _ => next.run(request).await,
    }
}

struct GrpcService {
    service: Arc<Service>,
}

type Rpc<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl GrpcInferenceService for GrpcService {
    async fn server_live(&self, _: Request<ServerLiveRequest>) -> Rpc<ServerLiveResponse> {
        Ok(Response::new(ServerLiveResponse { live: self.service.is_live() }))
    }

    async fn server_ready(&self, _: Request<ServerReadyRequest>) -> Rpc<ServerReadyResponse> {
        Ok(Response::new(ServerReadyResponse { ready: self.service.is_ready() }))
    }

    async fn model_ready(&self, request: Request<ModelReadyRequest>) -> Rpc<ModelReadyResponse> {
        let request = request.into_inner();
        let ready = self.service.model_ready(&request.name, &request.version).is_ok();
        Ok(Response::new(ModelReadyResponse { ready }))
    }

    async fn server_metadata(&self, _: Request<ServerMetadataRequest>) -> Rpc<ServerMetadataResponse> {
        let metadata = self.service.server_metadata();
        Ok(Response::new(ServerMetadataResponse {
            name: metadata.name.to_string(),
            version: metadata.version.to_string(),
            extensions: metadata.extensions.iter().map(|e| e.to_string()).collect(),
        }))
    }

    async fn model_metadata(&self, request: Request<ModelMetadataRequest>) -> Rpc<ModelMetadataResponse> {
        let request = request.into_inner();
        let metadata = self.service.model_metadata(&request.name, &request.version)?;
        let describe = |tensors: Vec<TensorMetadata>| {
            tensors
                .into_iter()
                .map(|t| model_metadata_response::TensorMetadata {
                    name: t.name,
                    datatype: t.datatype.to_string(),
                    shape: t.shape,
                })
                .collect()
        };
        Ok(Response::new(ModelMetadataResponse {
            name: metadata.name,
            versions: metadata.versions,
            platform: metadata.platform,
            inputs: describe(metadata.inputs),
            outputs: describe(metadata.outputs),
        }))
    }

    async fn model_config(&self, request: Request<ModelConfigRequest>) -> Rpc<ModelConfigResponse> {
        let request = request.into_inner();
        let config = self.service.model_config(&request.name, &request.version)?;
        Ok(Response::new(ModelConfigResponse { config: Some(config.as_ref().clone()) }))
    }

    async fn model_infer(&self, request: Request<ModelInferRequest>) -> Rpc<ModelInferResponse> {
        let (trace, message) = match tracer().is_on() {
            true => {
                let arrived = request.extensions().get::<Arrived>().copied();
                let headers = request.metadata().as_ref().clone();
                let message = request.into_inner();
                (traced::sample(&message.model_name, &headers, arrived, Wire::Grpc), message)
            }
            false => (None, request.into_inner()),
        };
        let (mut request, places) = convert::request_from_proto(message, self.service.shared_memory())?;
        request.trace = trace.clone();
        let response = self.service.infer_unary(request, "ModelInfer RPC").await;
        traced::answered(&trace);
        let mut response = Response::new(convert::response_to_proto(response?, &places)?);
        traced::send_with(trace, Wire::Grpc, response.extensions_mut());
        Ok(response)
    }

    type ModelStreamInferStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

    async fn model_stream_infer(
        &self,
        requests: Request<Streaming<ModelInferRequest>>,
    ) -> Rpc<Self::ModelStreamInferStream> {
        // The stream's headers are kept only while tracing is on (for a client's `traceparent`).
        let headers = match tracer().is_on() {
            true => requests.metadata().as_ref().clone(),
            false => Default::default(),
        };
        Ok(Response::new(Box::pin(stream::responses(self.service.clone(), requests.into_inner(), headers))))
    }

    async fn model_statistics(&self, request: Request<ModelStatisticsRequest>) -> Rpc<ModelStatisticsResponse> {
        let request = request.into_inner();
        Ok(Response::new(self.service.statistics(&request.name, &request.version)?))
    }

    async fn repository_index(&self, request: Request<RepositoryIndexRequest>) -> Rpc<RepositoryIndexResponse> {
        let entries = self.service.repository_index(request.into_inner().ready);
        Ok(Response::new(repository::index_response(entries)))
    }

    async fn repository_model_load(
        &self,
        request: Request<RepositoryModelLoadRequest>,
    ) -> Rpc<RepositoryModelLoadResponse> {
        let request = request.into_inner();
        let overrides = repository::load_overrides(request.parameters)?;
        self.service.load_model(&request.model_name, overrides).await?;
        Ok(Response::new(RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        request: Request<RepositoryModelUnloadRequest>,
    ) -> Rpc<RepositoryModelUnloadResponse> {
        let request = request.into_inner();
        repository::check_unload(&request.parameters)?;
        self.service.unload_model(&request.model_name).await?;
        Ok(Response::new(RepositoryModelUnloadResponse {}))
    }

    async fn system_shared_memory_status(
        &self,
        request: Request<SystemSharedMemoryStatusRequest>,
    ) -> Rpc<SystemSharedMemoryStatusResponse> {
        let regions = self.service.shared_memory().system_status(&request.into_inner().name)?;
        Ok(Response::new(shared_memory::status_response(regions)))
    }

    async fn system_shared_memory_register(
        &self,
        request: Request<SystemSharedMemoryRegisterRequest>,
    ) -> Rpc<SystemSharedMemoryRegisterResponse> {
        let request = request.into_inner();
        let offset = request.offset;
        self.service.shared_memory().register_system(&request.name, &request.key, offset, request.byte_size)?;
        Ok(Response::new(SystemSharedMemoryRegisterResponse {}))
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<SystemSharedMemoryUnregisterRequest>,
    ) -> Rpc<SystemSharedMemoryUnregisterResponse> {
        self.service.shared_memory().unregister_system(&request.into_inner().name)?;
        Ok(Response::new(SystemSharedMemoryUnregisterResponse {}))
    }

    async fn cuda_shared_memory_status(
        &self,
        request: Request<CudaSharedMemoryStatusRequest>,
    ) -> Rpc<CudaSharedMemoryStatusResponse> {
        self.service.shared_memory().cuda_status(&request.into_inner().name)?;
        Ok(Response::new(CudaSharedMemoryStatusResponse::default()))
    }

    async fn cuda_shared_memory_register(
        &self,
        request: Request<CudaSharedMemoryRegisterRequest>,
    ) -> Rpc<CudaSharedMemoryRegisterResponse> {
        self.service.shared_memory().register_cuda(&request.into_inner().name)?;
        Ok(Response::new(CudaSharedMemoryRegisterResponse {}))
    }

    async fn cuda_shared_memory_unregister(
        &self,
        _: Request<CudaSharedMemoryUnregisterRequest>,
    ) -> Rpc<CudaSharedMemoryUnregisterResponse> {
        self.service.shared_memory().unregister_cuda()?;
        Ok(Response::new(CudaSharedMemoryUnregisterResponse {}))
    }

    async fn trace_setting(&self, request: Request<TraceSettingRequest>) -> Rpc<TraceSettingResponse> {
        let request = request.into_inner();
        let settings = match request.settings.is_empty() {
            true => self.service.trace_settings(&request.model_name)?,
            false => {
                self.service.change_trace_settings(&request.model_name, &trace::trace_change(&request.settings)?)?
            }
        };
        Ok(Response::new(trace::response(settings, self.service.trace_exporter_options())))
    }

    async fn log_settings(&self, request: Request<LogSettingsRequest>) -> Rpc<LogSettingsResponse> {
        let change = logging::log_change(&request.into_inner().settings)?;
        Ok(Response::new(logging::response(self.service.change_log_settings(change))))
    }
}
