//! The HTTP/REST frontend: KServe v2 routes under `/v2`, JSON tensors and Triton's binary tensor data
//! extension, compressed request bodies. Errors are `{"error": "..."}` with Triton's status codes.

mod chunks;
mod generate;
pub(crate) mod infer;
mod json_data;
mod logging;
pub(crate) mod repository;
mod routes;
mod shared_memory;
mod trace;

use std::future::Future;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use hyper_util::service::TowerToHyperService;
use tower::Layer as _;

use super::restricted::{self, Restrictions};
use super::traced::{self, Arrived};
use crate::error::Error;
use crate::executor::connections::{self, ConnectionLimits, Opening};
use crate::service::Service;

/// Every route of the HTTP frontend, behind the restrictions `--http-restricted-api` asked for.
pub fn router(service: Arc<Service>, restrictions: Restrictions) -> Router {
    let limits = service.http_limits();
    let (max_body, body_timeout) = (limits.max_input_size, limits.body_timeout);
    let router = Router::new()
        .route("/v2", get(routes::server_metadata))
        .route("/v2/health/live", get(routes::live))
        .route("/v2/health/ready", get(routes::ready))
        .route("/v2/models/{model}", get(routes::model_metadata))
        .route("/v2/models/{model}/versions/{version}", get(routes::model_metadata_version))
        .route("/v2/models/{model}/ready", get(routes::model_ready))
        .route("/v2/models/{model}/versions/{version}/ready", get(routes::model_ready_version))
        .route("/v2/models/{model}/config", get(routes::model_config))
        .route("/v2/models/{model}/versions/{version}/config", get(routes::model_config_version))
        .route("/v2/models/stats", get(routes::all_statistics))
        .route("/v2/models/{model}/stats", get(routes::model_statistics))
        .route("/v2/models/{model}/versions/{version}/stats", get(routes::model_statistics_version))
        .route("/v2/logging", get(logging::settings).post(logging::change))
        .route("/v2/trace/setting", get(trace::global).post(trace::change_global))
        .route("/v2/models/{model}/trace/setting", get(trace::model).post(trace::change_model))
        .route("/v2/systemsharedmemory/status", get(shared_memory::system_status))
        .route("/v2/systemsharedmemory/region/{name}/status", get(shared_memory::system_region_status))
        .route("/v2/systemsharedmemory/region/{name}/register", post(shared_memory::system_register))
        .route("/v2/systemsharedmemory/region/{name}/unregister", post(shared_memory::system_unregister))
        .route("/v2/systemsharedmemory/unregister", post(shared_memory::system_unregister_all))
        .route("/v2/cudasharedmemory/status", get(shared_memory::cuda_status))
        .route("/v2/cudasharedmemory/region/{name}/status", get(shared_memory::cuda_region_status))
        .route("/v2/cudasharedmemory/region/{name}/register", post(shared_memory::cuda_register))
        .route("/v2/cudasharedmemory/region/{name}/unregister", post(shared_memory::cuda_unregister))
        .route("/v2/cudasharedmemory/unregister", post(shared_memory::cuda_unregister))
        .route("/v2/repository/index", post(repository::index))
        .route("/v2/repository/models/{model}/load", post(repository::load))
        .route("/v2/repository/models/{model}/unload", post(repository::unload))
        .route("/v2/models/{model}/infer", post(infer::infer))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer::infer_version))
        .route("/v2/models/{model}/generate", post(generate::generate::<false>))
        .route("/v2/models/{model}/versions/{version}/generate", post(generate::generate_version::<false>))
        .route("/v2/models/{model}/generate_stream", post(generate::generate::<true>))
        .route("/v2/models/{model}/versions/{version}/generate_stream", post(generate::generate_version::<true>))
        .fallback(routes::not_found)
        .layer(middleware::from_fn_with_state(BodyLimits { max: max_body, timeout: body_timeout }, read_body_in_time));
    // Without restrictions no layer is added, so that requests pay nothing for the feature.
    let router = match restrictions.is_empty() {
        true => router,
        false => router.layer(middleware::from_fn_with_state(Arc::new(restrictions), refuse_restricted)),
    };
    router.layer(DefaultBodyLimit::max(max_body)).with_state(service)
}

/// Answers 403 to a request of a restricted category without its header (Triton's message), before its
/// body is read.
async fn refuse_restricted(State(restrictions): State<Arc<Restrictions>>, request: Request, next: Next) -> Response {
    let category = restricted::http_category(request.uri().path());
    match category.map(|category| restrictions.check(category, request.headers())) {
        Some(Err(header)) => {
            error_body(StatusCode::FORBIDDEN, &format!("This API is restricted, expecting header '{header}'"))
        }
        _ => next.run(request).await,
    }
}

#[derive(Clone, Copy)]
struct BodyLimits {
    max: usize,
    timeout: Duration,
}

/// Reads a request's whole body before its handler runs, within `--http-body-timeout-secs` of its head. A
/// client that sends its body slowly, or never finishes it, is answered 408 and its connection closed
/// (hyper closes a connection whose request body was not read to its end) instead of holding it open.
async fn read_body_in_time(State(limits): State<BodyLimits>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let read = axum::body::to_bytes(body, limits.max);
    tokio::pin!(read);
    // Most bodies have arrived with their head: the first poll reads them whole, and no timer is armed
    // (arming and clearing one for every request cost measurable CPU at concurrency 1).
    let first_poll = std::future::poll_fn(|cx| std::task::Poll::Ready(read.as_mut().poll(cx))).await;
    let read = match first_poll {
        std::task::Poll::Ready(read) => Ok(read),
        std::task::Poll::Pending => tokio::time::timeout(limits.timeout, read).await,
    };
    match read {
        Ok(Ok(bytes)) => {
            let mut parts = parts;
            if let Some(arrived) = parts.extensions.get_mut::<Arrived>() {
                arrived.body = Some(Instant::now());
            }
            next.run(Request::from_parts(parts, Body::from(bytes))).await
        }
        Ok(Err(e)) if is_too_large(&e) => error_body(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the request body is larger than the limit of {} bytes (--http-max-input-size)", limits.max),
        ),
        Ok(Err(e)) => error_body(StatusCode::BAD_REQUEST, &format!("cannot read the request body: {e}")),
        Err(_) => error_body(
            StatusCode::REQUEST_TIMEOUT,
            &format!("the request body did not arrive within {:?} (--http-body-timeout-secs)", limits.timeout),
        ),
    }
}

fn is_too_large(error: &axum::Error) -> bool {
    std::error::Error::source(error).is_some_and(|cause| cause.is::<http_body_util::LengthLimitError>())
}

pub async fn serve(
    listener: tokio::net::TcpListener,
    service: Arc<Service>,
    limits: ConnectionLimits,
    restrictions: Restrictions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let header_timeout = service.http_limits().header_timeout;
    let service = TowerToHyperService::new(traced::layer().layer(router(service, restrictions)));
    let mut builder = http1::Builder::new();
    // hyper starts this timer whenever the connection waits for a request's head, so it also closes a
    // keep-alive connection that stays idle for as long.
    builder.timer(TokioTimer::new()).header_read_timeout(header_timeout).max_headers(MAX_HEADERS);
    connections::serve(listener, "HTTP", Opening::FirstByte, limits, shutdown, move |io| {
        builder.serve_connection(io, service.clone())
    })
    .await;
}

/// The most header fields a request may have (hyper's default, stated so it is not changed by accident).
const MAX_HEADERS: usize = 100;

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        (self.http_status(), Json(serde_json::json!({ "error": self.to_string() }))).into_response()
    }
}

/// The request body with any `Content-Encoding` (gzip, deflate) undone, refusing to inflate past `limit`
/// bytes so a small compressed body cannot exhaust memory.
pub(crate) fn decoded_body(headers: &HeaderMap, body: Bytes, limit: usize) -> Result<Bytes, Error> {
    let encoding = headers.get("content-encoding").map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    let mut decoder: Box<dyn Read> = match encoding.as_deref() {
        None | Some("identity") | Some("") => return Ok(body),
        Some("gzip") => Box::new(flate2::read::GzDecoder::new(&body[..])),
        Some("deflate") => Box::new(flate2::read::ZlibDecoder::new(&body[..])),
        Some(other) => {
            return Err(Error::invalid(format!("unsupported Content-Encoding '{other}' (use gzip or deflate)")))
        }
    };
    let mut inflated = Vec::new();
    (&mut decoder)
        .take(limit as u64 + 1)
        .read_to_end(&mut inflated)
        .map_err(|e| Error::invalid(format!("cannot decompress the request body: {e}")))?;
    if inflated.len() > limit {
        return Err(Error::invalid(format!("the decompressed request body is larger than the limit of {limit} bytes")));
    }
    Ok(Bytes::from(inflated))
}

/// A JSON response with Triton's `{"error": ...}` shape for a status without an `Error` value.
fn error_body(status: StatusCode, message: &str) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

/// A request body that must be a JSON object, or nothing (an empty object), as Triton's extensions take.
pub(crate) fn body_object(body: &[u8]) -> Result<serde_json::Map<String, serde_json::Value>, Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice(body) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(Error::invalid("the request body must be a JSON object")),
        Err(e) => Err(Error::invalid(format!("the request body is not valid JSON: {e}"))),
    }
}
