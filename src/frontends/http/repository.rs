//! The model repository extension over HTTP: `POST /v2/repository/index` (optionally `{"ready": true}`),
//! `POST /v2/repository/models/{m}/load` (optional `parameters`: `config`, a JSON model configuration, and
//! `file:<version>/<name>` model files in base64) and `POST /v2/repository/models/{m}/unload` (optional
//! `parameters.unload_dependents`; no model depends on another here, so it changes nothing). Bodies are
//! optional, as in Triton; what is there must be well-formed.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use bytes::Bytes;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::service::LoadOverrides;
use crate::service::Service;

use super::body_object;

type Ctx = State<Arc<Service>>;

pub async fn index(State(ctx): Ctx, body: Bytes) -> Response {
    let ready_only = match body_object(&body) {
        Ok(body) => match body.get("ready") {
            None => false,
            Some(Value::Bool(ready)) => *ready,
            Some(other) => return Error::invalid(format!("'ready' must be a boolean, got {other}")).into_response(),
        },
        Err(e) => return e.into_response(),
    };
    let entries: Vec<Value> = ctx
        .repository_index(ready_only)
        .into_iter()
        .map(|e| {
            let mut entry = Map::new();
            entry.insert("name".into(), e.name.into());
            for (key, value) in [("version", e.version), ("state", e.state), ("reason", e.reason)] {
                if !value.is_empty() {
                    entry.insert(key.into(), value.into());
                }
            }
            Value::Object(entry)
        })
        .collect();
    Json(entries).into_response()
}

pub async fn load(State(ctx): Ctx, Path(model): Path<String>, body: Bytes) -> Response {
    let overrides = match body_object(&body).and_then(|body| load_overrides(&body)) {
        Ok(overrides) => overrides,
        Err(e) => return e.into_response(),
    };
    match ctx.load_model(&model, overrides).await {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn unload(State(ctx): Ctx, Path(model): Path<String>, body: Bytes) -> Response {
    let checked = body_object(&body).and_then(|body| match parameters(&body)?.get("unload_dependents") {
        None | Some(Value::Bool(_)) => Ok(()),
        Some(other) => Err(Error::invalid(format!("'unload_dependents' must be a boolean, got {other}"))),
    });
    match checked {
        Ok(()) => match ctx.unload_model(&model).await {
            Ok(()) => StatusCode::OK.into_response(),
            Err(e) => e.into_response(),
        },
        Err(e) => e.into_response(),
    }
}

/// The body as a JSON object; an empty body is an empty object.
fn parameters(body: &Map<String, Value>) -> Result<Map<String, Value>> {
    match body.get("parameters") {
        None => Ok(Map::new()),
        Some(Value::Object(parameters)) => Ok(parameters.clone()),
        Some(_) => Err(Error::invalid("'parameters' must be a JSON object")),
    }
}

pub(crate) fn load_overrides(body: &Map<String, Value>) -> Result<LoadOverrides> {
    let mut overrides = LoadOverrides::default();
    for (key, value) in parameters(body)? {
        let text = || match &value {
            Value::String(s) => Ok(s.clone()),
            other => Err(Error::invalid(format!("parameter '{key}' must be a string, got {other}"))),
        };
        if key == "config" {
            overrides.config = Some(text()?);
        } else if let Some(path) = key.strip_prefix("file:") {
            let content = base64::engine::general_purpose::STANDARD
                .decode(text()?)
                .map_err(|e| Error::invalid(format!("parameter '{key}' is not valid base64: {e}")))?;
            overrides.files.push((path.to_string(), Bytes::from(content)));
        }
    }
    Ok(overrides)
}
