//! The HTTP routes that are not inference: health, server and model metadata, model configuration.
//! Readiness answers 200 or 400 with no body beyond the error, as Triton does.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error_body;
use crate::error::Error;
use crate::service::Service;

type Ctx = State<Arc<Service>>;

pub async fn server_metadata(State(ctx): Ctx) -> Response {
    let metadata = ctx.server_metadata();
    Json(serde_json::json!({
        "name": metadata.name,
        "version": metadata.version,
        "extensions": metadata.extensions,
    }))
    .into_response()
}

pub async fn live(State(ctx): Ctx) -> StatusCode {
    status_of(ctx.is_live())
}

pub async fn ready(State(ctx): Ctx) -> StatusCode {
    status_of(ctx.is_ready())
}

fn status_of(ok: bool) -> StatusCode {
    if ok {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    }
}

pub async fn model_metadata(ctx: Ctx, Path(model): Path<String>) -> Response {
    metadata(ctx, &model, "")
}

pub async fn model_metadata_version(ctx: Ctx, Path((model, version)): Path<(String, String)>) -> Response {
    metadata(ctx, &model, &version)
}

fn metadata(State(ctx): Ctx, model: &str, version: &str) -> Response {
    match ctx.model_metadata(model, version) {
        Ok(m) => Json(serde_json::json!({
            "name": m.name,
            "versions": m.versions,
            "platform": m.platform,
            "inputs": m.inputs.iter().map(|t| serde_json::json!({"name": t.name, "datatype": t.datatype, "shape": t.shape})).collect::<Vec<_>>(),
            "outputs": m.outputs.iter().map(|t| serde_json::json!({"name": t.name, "datatype": t.datatype, "shape": t.shape})).collect::<Vec<_>>(),
        }))
        .into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn model_ready(ctx: Ctx, Path(model): Path<String>) -> Response {
    readiness(ctx, &model, "")
}

pub async fn model_ready_version(ctx: Ctx, Path((model, version)): Path<(String, String)>) -> Response {
    readiness(ctx, &model, &version)
}

/// Triton answers every not-ready case, unknown models included, with 400.
fn readiness(State(ctx): Ctx, model: &str, version: &str) -> Response {
    match ctx.model_ready(model, version) {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => error_body(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

pub async fn model_config(ctx: Ctx, Path(model): Path<String>) -> Response {
    config(ctx, &model, "")
}

pub async fn model_config_version(ctx: Ctx, Path((model, version)): Path<(String, String)>) -> Response {
    config(ctx, &model, &version)
}

fn config(State(ctx): Ctx, model: &str, version: &str) -> Response {
    match ctx.model_config_json(model, version) {
        Ok(config) => Json(config.as_ref().clone()).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn all_statistics(ctx: Ctx) -> Response {
    statistics(ctx, "", "")
}

pub async fn model_statistics(ctx: Ctx, Path(model): Path<String>) -> Response {
    statistics(ctx, &model, "")
}

pub async fn model_statistics_version(ctx: Ctx, Path((model, version)): Path<(String, String)>) -> Response {
    statistics(ctx, &model, &version)
}

fn statistics(State(ctx): Ctx, model: &str, version: &str) -> Response {
    match ctx.statistics(model, version) {
        Ok(stats) => Json(crate::proto::to_triton_json(&stats, "inference.ModelStatisticsResponse")).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn not_found() -> Response {
    Error::NotFound("no such endpoint".into()).into_response()
}
