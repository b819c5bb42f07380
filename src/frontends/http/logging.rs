//! The logging extension over HTTP: `GET /v2/logging` answers the settings, `POST /v2/logging` changes the
//! ones its JSON object names (a `null` leaves one as it is) and answers them all. Triton's codes: a log
//! file is fixed at start-up (501), a value of the wrong JSON type is 400, and an unknown `log_format` is
//! 503 with tritonserver's message. `json` is a format Tessera adds.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{Map, Value};

use super::{body_object, error_body};
use crate::observability::logging::{LogFormat, LogSettings};
use crate::service::{LogChange, Service, LOG_FILE_FIXED};

type Ctx = State<Arc<Service>>;

pub async fn settings(State(ctx): Ctx) -> Response {
    Json(settings_json(&ctx.log_settings())).into_response()
}

pub async fn change(State(ctx): Ctx, body: Bytes) -> Response {
    let body = match body_object(&body) {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    match log_change(&body) {
        Ok(change) => Json(settings_json(&ctx.change_log_settings(change))).into_response(),
        Err((status, message)) => error_body(status, &message),
    }
}

fn settings_json(settings: &LogSettings) -> Value {
    serde_json::json!({
        "log_file": settings.file,
        "log_info": settings.levels.info,
        "log_warning": settings.levels.warning,
        "log_error": settings.levels.error,
        "log_verbose_level": settings.levels.verbose,
        "log_format": settings.format.name(),
    })
}

/// What `body` asks to change, or the status and message refusing it.
fn log_change(body: &Map<String, Value>) -> Result<LogChange, (StatusCode, String)> {
    let present = |key: &str| body.get(key).filter(|value| !value.is_null());
    let invalid = |message: String| (StatusCode::BAD_REQUEST, message);
    if present("log_file").is_some() {
        return Err((StatusCode::NOT_IMPLEMENTED, LOG_FILE_FIXED.to_string()));
    }
    let boolean = |key: &str| match present(key) {
        None => Ok(None),
        Some(Value::Bool(on)) => Ok(Some(*on)),
        Some(_) => Err(invalid(format!("'{key}' must be a boolean"))),
    };
    let verbose = match present("log_verbose_level") {
        None => None,
        Some(value) => match value.as_u64().and_then(|level| u32::try_from(level).ok()) {
            Some(level) => Some(level),
            None => return Err(invalid("'log_verbose_level' must be an unsigned integer".into())),
        },
    };
    let format = match present("log_format") {
        None => None,
        Some(Value::String(name)) => match LogFormat::from_name(name) {
            Some(format) => Some(format),
            None => {
                let message = format!("invalid argument for --log_format, got: {name}");
                return Err((StatusCode::SERVICE_UNAVAILABLE, message));
            }
        },
        Some(_) => return Err(invalid("'log_format' must be a string".into())),
    };
    Ok(LogChange {
        info: boolean("log_info")?,
        warning: boolean("log_warning")?,
        error: boolean("log_error")?,
        verbose,
        format,
    })
}
