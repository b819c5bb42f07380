//! The trace extension over HTTP: `GET/POST /v2/trace/setting` (global) and
//! `/v2/models/{m}/trace/setting` (one model, which must be ready). A POST sets the fields its JSON object
//! names and clears the ones it gives as `null` (a model's fall back to the global ones); values are
//! strings, levels a list. Triton's messages and codes: a trace file is fixed at start-up (501).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{Map, Value};

use super::{body_object, error_body};
use crate::error::Error;
use crate::observability::trace::settings::{parse_count, parse_log_frequency, parse_rate};
use crate::observability::trace::{Change, Level, Mode, Settings};
use crate::service::{Service, TRACE_FILE_FIXED};

type Ctx = State<Arc<Service>>;

pub async fn global(State(ctx): Ctx) -> Response {
    answer(&ctx, ctx.trace_settings(""))
}

pub async fn change_global(State(ctx): Ctx, body: Bytes) -> Response {
    change(&ctx, "", &body)
}

pub async fn model(State(ctx): Ctx, Path(model): Path<String>) -> Response {
    answer(&ctx, ctx.trace_settings(&model))
}

pub async fn change_model(State(ctx): Ctx, Path(model): Path<String>, body: Bytes) -> Response {
    change(&ctx, &model, &body)
}

fn change(ctx: &Service, model: &str, body: &[u8]) -> Response {
    let body = match body_object(body) {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    if body.contains_key("trace_file") {
        return error_body(StatusCode::NOT_IMPLEMENTED, TRACE_FILE_FIXED);
    }
    match trace_change(&body) {
        Ok(change) => answer(ctx, ctx.change_trace_settings(model, &change)),
        Err(message) => Error::invalid(message).into_response(),
    }
}

/// The settings as Triton lists them: the file's in the triton mode, the exporter's in the opentelemetry
/// mode (each a string, the resource attributes a list).
fn answer(ctx: &Service, settings: crate::error::Result<Settings>) -> Response {
    let settings = match settings {
        Ok(settings) => settings,
        Err(e) => return e.into_response(),
    };
    let mut answer = serde_json::json!({
        "trace_level": settings.level.names(),
        "trace_rate": settings.rate.to_string(),
        "trace_count": settings.count.to_string(),
        "trace_mode": settings.mode.name(),
    });
    if settings.mode == Mode::Triton {
        answer["log_frequency"] = settings.log_frequency.to_string().into();
        answer["trace_file"] = settings.file.into();
    }
    let exporter = ctx.trace_exporter_options();
    let resources: Vec<&str> =
        exporter.iter().filter(|(key, _)| *key == "resource").map(|(_, value)| value.as_str()).collect();
    if !resources.is_empty() {
        answer["resource"] = resources.into();
    }
    for (key, value) in exporter.iter().filter(|(key, _)| *key != "resource") {
        answer[*key] = value.clone().into();
    }
    Json(answer).into_response()
}

/// What `body` asks to change, or why it cannot.
fn trace_change(body: &Map<String, Value>) -> Result<Change, String> {
    let level = match body.get("trace_level") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::Array(names)) => {
            let names: Option<Vec<&str>> = names.iter().map(Value::as_str).collect();
            let names = names.ok_or("'trace_level' must be a list of strings")?;
            Some(Some(Level::from_names(names)?))
        }
        Some(other) => return Err(format!("'trace_level' must be a list of strings, got {other}")),
    };
    Ok(Change {
        level,
        rate: number(body, "trace_rate", parse_rate)?,
        count: number(body, "trace_count", parse_count)?,
        log_frequency: number(body, "log_frequency", parse_log_frequency)?,
    })
}

/// A numeric setting: absent (`None`), cleared by `null` (`Some(None)`), or a string that `parse` reads.
fn number<T>(
    body: &Map<String, Value>,
    key: &str,
    parse: fn(&str, &str) -> Result<T, String>,
) -> Result<Option<Option<T>>, String> {
    match body.get(key) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(text)) => Ok(Some(Some(parse(key, text)?))),
        Some(other) => Err(format!("'{key}' must be a string, got {other}")),
    }
}
