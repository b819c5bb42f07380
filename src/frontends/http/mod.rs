//! The HTTP/REST frontend: KServe v2 routes under `/v2`, JSON tensors and Triton's binary tensor data
//! extension, compressed request bodies. Errors are `{"error": "..."}` with Triton's status codes.

mod infer;
mod json_data;
mod repository;
mod routes;

use std::io::Read;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use hyper::server::conn::http1;
use hyper_util::service::TowerToHyperService;

use crate::error::Error;
use crate::frontends::connections;
use crate::server::ServerContext;

/// Every route of the HTTP frontend.
pub fn router(context: Arc<ServerContext>) -> Router {
    let max_body = context.options.http_max_input_size;
    Router::new()
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
        .route("/v2/repository/index", post(repository::index))
        .route("/v2/repository/models/{model}/load", post(repository::load))
        .route("/v2/repository/models/{model}/unload", post(repository::unload))
        .route("/v2/models/{model}/infer", post(infer::infer))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer::infer_version))
        .fallback(routes::not_found)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(context)
}

pub async fn serve(
    listener: tokio::net::TcpListener,
    context: Arc<ServerContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let service = TowerToHyperService::new(router(context));
    let builder = http1::Builder::new();
    connections::serve(listener, "HTTP", shutdown, |io| builder.serve_connection(io, service.clone())).await;
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        (self.http_status(), Json(serde_json::json!({ "error": self.to_string() }))).into_response()
    }
}

/// The request body with any `Content-Encoding` (gzip, deflate) undone, refusing to inflate past `limit`
/// bytes so a small compressed body cannot exhaust memory.
fn decoded_body(headers: &HeaderMap, body: Bytes, limit: usize) -> Result<Bytes, Error> {
    let encoding = headers.get("content-encoding").map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    let mut decoder: Box<dyn Read> = match encoding.as_deref() {
        None | Some("identity") | Some("") => return Ok(body),
        Some("gzip") => Box::new(flate2::read::GzDecoder::new(&body[..])),
        Some("deflate") => Box::new(flate2::read::ZlibDecoder::new(&body[..])),
        Some(other) => return Err(Error::invalid(format!("unsupported Content-Encoding '{other}' (use gzip or deflate)"))),
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
