//! Triton's generate extension: `POST /v2/models/{m}[/versions/{v}]/generate` and `.../generate_stream`.
//!
//! The body is one JSON object. A top-level key that names a model input is that input: a value or a 1-D
//! array, shaped as Triton shapes it from the input's metadata (fixed dimensions divide the element count,
//! the innermost -1 takes what is left, any other -1 is 1). `id` is the request id; `parameters` is an
//! object whose keys follow the same rule; any other key is a request parameter. The answer is one object:
//! `model_name`, `model_version`, `id` when given, and each output by name (one element as a scalar, more as
//! a flat array).
//!
//! `generate_stream` sends the same objects as Server-Sent Events, `data: {...}` per response, as the model
//! sends them (one for a model that is not decoupled, any number for a decoupled one). `generate` takes a
//! decoupled model only if it answers with exactly one response, as Triton. A request refused before the
//! model runs (malformed, unknown model, bad input) is answered as `generate` answers it, a JSON error with
//! its status; an error from the model itself comes as a `data: {"error": ...}` event, as Triton sends it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use futures_util::stream::{self, BoxStream};
use futures_util::{future, StreamExt};
use serde_json::{Map, Value};

use super::decoded_body;
use super::infer::parameter_from_json;
use super::json_data::{self, JsonData};
use crate::error::{Error, Result};
use crate::frontends::traced::{self, Arrived, Wire};
use crate::inference::{InferenceRequest, InferenceResponse, Streamed};
use crate::service::{Service, TensorMetadata};
use crate::tensor::{DataType, Tensor};

type Ctx = State<Arc<Service>>;

type Arrival = Option<Extension<Arrived>>;

/// `generate` (`STREAM` false) or `generate_stream` (true) on the model's newest ready version.
pub async fn generate<const STREAM: bool>(
    ctx: Ctx,
    Path(model): Path<String>,
    arrived: Arrival,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(ctx, model, String::new(), arrived, headers, body, STREAM).await
}

/// `generate` or `generate_stream` on one version.
pub async fn generate_version<const STREAM: bool>(
    ctx: Ctx,
    Path((model, version)): Path<(String, String)>,
    arrived: Arrival,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(ctx, model, version, arrived, headers, body, STREAM).await
}

/// Answers one `generate` or (`stream`) `generate_stream` request, traced like an `infer` (a stream's
/// response is sent when its last event has gone).
async fn handle(
    State(ctx): Ctx,
    model: String,
    version: String,
    arrived: Arrival,
    headers: HeaderMap,
    body: Bytes,
    stream: bool,
) -> Response {
    let trace = traced::sample(&model, &headers, arrived.map(|Extension(arrived)| arrived), Wire::Http);
    let opened = decoded_body(&headers, body, ctx.http_limits().max_input_size)
        .and_then(|body| decode_request(&ctx, model, version, &body))
        .and_then(|mut request| {
            request.trace = trace.clone();
            ctx.infer_stream(request)
        });
    let mut response = match opened {
        Ok(answers) if stream => events(answers.messages).await,
        Ok(answers) => {
            let response = single(answers.messages).await;
            traced::answered(&trace);
            response
        }
        Err(e) => e.into_response(),
    };
    traced::send_with(trace, Wire::Http, response.extensions_mut());
    response
}

/// `generate`: the model's one response as a JSON object. A decoupled model that sends more than one (or
/// none) is answered with Triton's error.
async fn single(mut messages: BoxStream<'static, Streamed>) -> Response {
    let mut answers = Vec::new();
    while let Some(streamed) = messages.next().await {
        match streamed.response {
            Err(e) => return e.into_response(),
            Ok(Some(response)) if answers.is_empty() => answers.push(response),
            // A second response: no need to wait for more.
            Ok(Some(_)) => return not_exactly_one().into_response(),
            Ok(None) => {}
        }
    }
    match answers.pop() {
        Some(response) => encoded(&response),
        None => not_exactly_one().into_response(),
    }
}

fn not_exactly_one() -> Error {
    Error::internal(
        "generate expects model to produce exactly 1 response, use generate stream for model that generates various \
         number of responses",
    )
}

fn encoded(response: &InferenceResponse) -> Response {
    match encode_response(response) {
        Ok(object) => Json(object).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `generate_stream`: each response as a Server-Sent Event. A request refused before the model ran (the first
/// message is an error that is not the model's own) is answered as `generate` answers it.
async fn events(mut messages: BoxStream<'static, Streamed>) -> Response {
    let first = messages.next().await;
    if let Some(Streamed { response: Err(e), .. }) = &first {
        if !matches!(e, Error::Internal(_)) {
            return e.clone().into_response();
        }
    }
    let events = stream::iter(first)
        .chain(messages)
        .filter_map(|streamed| future::ready(event(streamed)))
        .map(Ok::<_, std::convert::Infallible>);
    ([(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"))], Body::from_stream(events))
        .into_response()
}

/// One Server-Sent Event: a response's object, or `{"error": ...}`; nothing for a bare final flag.
fn event(streamed: Streamed) -> Option<Bytes> {
    let object = match streamed.response.and_then(|response| response.map(|r| encode_response(&r)).transpose()) {
        Ok(Some(object)) => object,
        Ok(None) => return None,
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    };
    Some(Bytes::from(format!("data: {object}\n\n")))
}

fn decode_request(ctx: &Service, model: String, version: String, body: &[u8]) -> Result<InferenceRequest> {
    let object: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| Error::invalid(format!("malformed generate request JSON: {e}")))?;
    let metadata = ctx.model_metadata(&model, &version)?;
    let mut request = InferenceRequest { model, version, ..Default::default() };
    map_members(object, &metadata.inputs, &mut request, true)?;
    Ok(request)
}

/// Maps the members of `object` (the body, or its `parameters` object) onto inputs and parameters.
fn map_members(
    object: Map<String, Value>,
    inputs: &[TensorMetadata],
    request: &mut InferenceRequest,
    top_level: bool,
) -> Result<()> {
    for (key, value) in object {
        if let Some(input) = inputs.iter().find(|input| input.name == key) {
            request.inputs.push(input_tensor(input, &value)?);
        } else if top_level && key == "id" {
            request.id = value.as_str().map(str::to_string).ok_or_else(|| Error::invalid("'id' must be a string"))?;
        } else if top_level && key == "parameters" {
            let Value::Object(nested) = value else {
                return Err(Error::invalid("Expected JSON object for keyword: 'parameters'"));
            };
            map_members(nested, inputs, request, false)?;
        } else {
            let parameter = parameter_from_json(&key, value)?;
            request.parameters.push((key, parameter));
        }
    }
    Ok(())
}

/// Input `input` from a JSON value or 1-D array, shaped as Triton shapes generate inputs.
fn input_tensor(input: &TensorMetadata, value: &Value) -> Result<Tensor> {
    let name = &input.name;
    let datatype = DataType::from_kserve(input.datatype)
        .ok_or_else(|| Error::invalid(format!("input '{name}' has unsupported datatype {}", input.datatype)))?;
    let count = match value {
        Value::Array(items) if items.iter().any(Value::is_array) => {
            return Err(Error::invalid(format!("input '{name}': a generate request takes a value or a 1-D array")))
        }
        Value::Array(items) => items.len(),
        _ => 1,
    };
    let shape = generate_shape(name, &input.shape, count)?;
    let data = json_data::decode(name, datatype, count, value)?;
    Ok(Tensor { name: name.clone(), datatype, shape, data })
}

/// The shape of `count` elements for an input of metadata shape `dims`: each fixed dimension must divide
/// what is left, the innermost -1 takes the rest, the other -1s are 1.
fn generate_shape(name: &str, dims: &[i64], count: usize) -> Result<Vec<i64>> {
    let cannot = || Error::invalid(format!("The schema can not convert input '{name}' to tensor with proper shape"));
    let mut left = count as i64;
    for &dim in dims.iter().filter(|&&d| d != -1) {
        if dim <= 0 || left % dim != 0 {
            return Err(cannot());
        }
        left /= dim;
    }
    let mut shape = dims.to_vec();
    for dim in shape.iter_mut().rev().filter(|d| **d == -1) {
        *dim = left;
        left = 1;
    }
    if left != 1 {
        return Err(cannot());
    }
    Ok(shape)
}

/// The generate answer: model, version, id when given, each output by name.
fn encode_response(response: &InferenceResponse) -> Result<Value> {
    let mut object = Map::new();
    object.insert("model_name".into(), Value::from(response.model.as_str()));
    object.insert("model_version".into(), Value::from(response.version.to_string()));
    if !response.id.is_empty() {
        object.insert("id".into(), Value::from(response.id.as_str()));
    }
    for tensor in &response.outputs {
        let data = serde_json::to_value(JsonData(tensor)).map_err(|e| Error::invalid(e.to_string()))?;
        let value = match data {
            Value::Array(mut items) if items.len() == 1 => items.remove(0),
            other => other,
        };
        object.insert(tensor.name.clone(), value);
    }
    Ok(Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generate_inputs_take_triton_shapes() {
        assert_eq!(generate_shape("x", &[-1, -1], 5).unwrap(), vec![1, 5]);
        assert_eq!(generate_shape("x", &[-1, 4], 8).unwrap(), vec![2, 4]);
        assert_eq!(generate_shape("x", &[1], 1).unwrap(), vec![1]);
        assert_eq!(generate_shape("x", &[16], 16).unwrap(), vec![16]);
        assert!(generate_shape("x", &[16], 15).is_err());
        assert!(generate_shape("x", &[2, 2], 5).is_err());
        assert!(generate_shape("x", &[0], 3).is_err());
    }
}
