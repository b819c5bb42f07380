//! The shared memory extension over HTTP: Triton's `/v2/systemsharedmemory/...` and
//! `/v2/cudasharedmemory/...` routes (status, register, unregister), and the tensor parameters that put an
//! inference input or output in a registered region (`shared_memory_region`, `shared_memory_offset`,
//! `shared_memory_byte_size`), with Triton's messages.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{Map, Value};

use super::body_object;
use crate::error::{Error, Result};
use crate::service::Service;
use crate::shared_memory::ShmReference;

type Ctx = State<Arc<Service>>;

pub async fn system_status(State(ctx): Ctx) -> Response {
    system_status_of(&ctx, "")
}

pub async fn system_region_status(State(ctx): Ctx, Path(name): Path<String>) -> Response {
    system_status_of(&ctx, &name)
}

fn system_status_of(ctx: &Service, name: &str) -> Response {
    match ctx.shared_memory().system_status(name) {
        Ok(regions) => Json(
            regions
                .into_iter()
                .map(
                    |r| serde_json::json!({"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}),
                )
                .collect::<Vec<_>>(),
        )
        .into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn system_register(State(ctx): Ctx, Path(name): Path<String>, body: Bytes) -> Response {
    let registered = body_object(&body).and_then(|body| {
        let key = match body.get("key") {
            None => return Err(Error::invalid("Shared memory register request has no 'key' field")),
            Some(Value::String(key)) => key,
            Some(_) => return Err(Error::invalid("Shared memory register request's 'key' must be a string")),
        };
        let offset = match body.get("offset") {
            None => 0,
            Some(value) => unsigned(value, "offset")?,
        };
        let byte_size = match body.get("byte_size") {
            None => return Err(Error::invalid("Shared memory register request has no 'byte_size' field")),
            Some(value) => unsigned(value, "byte_size")?,
        };
        ctx.shared_memory().register_system(&name, key, offset, byte_size)
    });
    answer(registered)
}

pub async fn system_unregister(State(ctx): Ctx, Path(name): Path<String>) -> Response {
    answer(ctx.shared_memory().unregister_system(&name))
}

pub async fn system_unregister_all(State(ctx): Ctx) -> Response {
    answer(ctx.shared_memory().unregister_system(""))
}

pub async fn cuda_status(State(ctx): Ctx) -> Response {
    answer_list(ctx.shared_memory().cuda_status(""))
}

pub async fn cuda_region_status(State(ctx): Ctx, Path(name): Path<String>) -> Response {
    answer_list(ctx.shared_memory().cuda_status(&name))
}

pub async fn cuda_register(State(ctx): Ctx, Path(name): Path<String>) -> Response {
    answer(ctx.shared_memory().register_cuda(&name))
}

pub async fn cuda_unregister(State(ctx): Ctx) -> Response {
    answer(ctx.shared_memory().unregister_cuda())
}

fn answer(outcome: Result<()>) -> Response {
    match outcome {
        Ok(()) => axum::http::StatusCode::OK.into_response(),
        Err(e) => e.into_response(),
    }
}

/// The empty list of CUDA regions, or why not.
fn answer_list(outcome: Result<()>) -> Response {
    match outcome {
        Ok(()) => Json(Vec::<Value>::new()).into_response(),
        Err(e) => e.into_response(),
    }
}

fn unsigned(value: &Value, field: &str) -> Result<u64> {
    value
        .as_u64()
        .ok_or_else(|| Error::invalid(format!("Unable to parse '{field}': expected an unsigned integer, got {value}")))
}

/// A tensor's shared memory parameters, if it names a region; Triton's messages for ill-typed values.
pub fn reference(parameters: &Map<String, Value>) -> Result<Option<ShmReference>> {
    let Some(region) = parameters.get("shared_memory_region") else { return Ok(None) };
    let Value::String(region) = region else { return Err(Error::invalid("Unable to parse 'shared_memory_region'")) };
    let number = |key: &str| match parameters.get(key) {
        None => Ok(0),
        Some(value) => value.as_u64().ok_or_else(|| Error::invalid(format!("Unable to parse '{key}'"))),
    };
    Ok(Some(ShmReference {
        region: region.clone(),
        offset: number("shared_memory_offset")?,
        byte_size: number("shared_memory_byte_size")?,
    }))
}
