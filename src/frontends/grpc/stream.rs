//! gRPC `ModelStreamInfer`: a bidirectional stream on which a client sends requests, for any models, and
//! reads their responses, each carrying its request's `id`. A model that is not decoupled answers each
//! request once; a decoupled one answers with any number of responses, then a final flag. As in Triton,
//! every response carries the `triton_final_response` parameter (true on a request's last one); a decoupled
//! model's final flag without a response is sent as an empty response only when the request sets
//! `triton_enable_empty_final_response`; a request that fails (a bad request, an unknown model, an error in
//! the model) is answered on the stream with `error_message` and its `id`, model name and version, and the
//! stream stays open.
//!
//! A stream's requests run at once, up to `IN_FLIGHT`. Responses of models that are not decoupled leave in
//! the order their requests came, as Triton's do; a decoupled model's responses leave as they are sent,
//! interleaved with the others'. Past `IN_FLIGHT` the stream's next request is not read until an earlier
//! one is answered and its responses taken by the client; a decoupled model whose client does not read waits
//! in its sends (see `inference::responder`). So a client that sends without reading holds a bounded
//! amount of server memory (HTTP/2 flow control stops it sending).

use std::sync::{Arc, Mutex, PoisonError};

use futures_util::stream::{self, BoxStream};
use futures_util::{future, Stream, StreamExt};
use tonic::{Status, Streaming};

use super::convert;
use crate::error::Error;
use crate::frontends::traced::{self, Wire};
use crate::inference::Streamed;
use crate::observability::trace::Trace;
use crate::proto::inference::{
    infer_parameter, InferParameter, ModelInferRequest, ModelInferResponse, ModelStreamInferResponse,
};
use crate::service::Service;
use crate::shared_memory::OutputPlace;
use axum::http::HeaderMap;

/// Requests of one stream answered at once, at most.
const IN_FLIGHT: usize = 64;

/// The request parameter that asks for a decoupled model's final flag even when it comes without a response.
const EMPTY_FINAL: &str = "triton_enable_empty_final_response";

/// The response stream of the request stream `requests`. An error on the request stream (a message that
/// does not decode, the client going away) stops reading it: the requests read before it are still answered,
/// and then the stream ends with that error's status, so a client is told why its later requests went
/// unanswered. `headers` are the stream's, for a client's `traceparent`.
pub fn responses(
    service: Arc<Service>,
    requests: Streaming<ModelInferRequest>,
    headers: HeaderMap,
) -> impl Stream<Item = Result<ModelStreamInferResponse, Status>> + Send {
    let headers = Arc::new(headers);
    let ended_by = Arc::new(Mutex::new(None));
    let record = ended_by.clone();
    let answers = traced::arrivals(requests)
        .scan((), move |(), (request, arrived)| {
            future::ready(match request {
                Ok(request) => Some((request, arrived)),
                Err(status) => {
                    *record.lock().unwrap_or_else(PoisonError::into_inner) = Some(status);
                    None
                }
            })
        })
        .map(move |(request, arrived)| {
            let trace = traced::sample(&request.model_name, &headers, arrived, Wire::Grpc);
            answer(service.clone(), request, trace)
        })
        .buffered(IN_FLIGHT)
        .flatten_unordered(IN_FLIGHT)
        .map(Ok);
    let ending = stream::once(async move { ended_by.lock().unwrap_or_else(PoisonError::into_inner).take().map(Err) });
    answers.chain(ending.filter_map(future::ready))
}

/// The stream messages answering one request. For a model that is not decoupled this waits for the answer,
/// which keeps such answers in request order; for a decoupled one it returns at once.
async fn answer(
    service: Arc<Service>,
    request: ModelInferRequest,
    trace: Option<Trace>,
) -> BoxStream<'static, ModelStreamInferResponse> {
    let identity = ModelInferResponse {
        id: request.id.clone(),
        model_name: request.model_name.clone(),
        model_version: request.model_version.clone(),
        ..Default::default()
    };
    let empty_final = wants_empty_final(&request);
    let opened = convert::request_from_proto(request, service.shared_memory()).and_then(|(mut request, places)| {
        request.trace = trace.clone();
        Ok((service.infer_stream(request)?, places))
    });
    let (answers, places) = match opened {
        Ok(opened) => opened,
        Err(e) => return traced::sending(stream::iter([failed(identity, e, true)]).boxed(), trace),
    };
    let mut messages = answers
        .messages
        .filter_map(move |streamed| future::ready(message(streamed, &identity, empty_final, &places)))
        .boxed();
    if answers.decoupled {
        return traced::sending(messages, trace);
    }
    let only = messages.next().await;
    traced::answered(&trace);
    traced::sending(stream::iter(only).boxed(), trace)
}

/// The stream message for one response (`None`: a bare final flag nobody asked to see); outputs with a
/// place in `places` are written into shared memory.
fn message(
    streamed: Streamed,
    identity: &ModelInferResponse,
    empty_final: bool,
    places: &[Option<OutputPlace>],
) -> Option<ModelStreamInferResponse> {
    match streamed.response {
        Ok(Some(response)) => match convert::response_to_proto(response, places) {
            Ok(encoded) => Some(flagged(encoded, String::new(), streamed.last)),
            Err(e) => Some(failed(identity.clone(), e, streamed.last)),
        },
        Ok(None) if empty_final && streamed.last => Some(flagged(identity.clone(), String::new(), true)),
        Ok(None) => None,
        Err(e) => Some(failed(identity.clone(), e, streamed.last)),
    }
}

/// The error message for a request that failed.
fn failed(identity: ModelInferResponse, error: Error, last: bool) -> ModelStreamInferResponse {
    flagged(identity, Status::from(error).message().to_string(), last)
}

/// `response` with its `triton_final_response` flag and, when it failed, `error_message`.
fn flagged(mut response: ModelInferResponse, error_message: String, last: bool) -> ModelStreamInferResponse {
    let flag = InferParameter { parameter_choice: Some(infer_parameter::ParameterChoice::BoolParam(last)) };
    response.parameters.insert("triton_final_response".to_string(), flag);
    ModelStreamInferResponse { error_message, infer_response: Some(response) }
}

/// Whether the request sets `triton_enable_empty_final_response` to true.
fn wants_empty_final(request: &ModelInferRequest) -> bool {
    request.parameters.get(EMPTY_FINAL).is_some_and(|parameter| {
        matches!(parameter.parameter_choice, Some(infer_parameter::ParameterChoice::BoolParam(true)))
    })
}
