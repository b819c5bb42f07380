//! gRPC `ModelStreamInfer`: a bidirectional stream on which a client sends requests, for any models, and
//! reads one response per request, carrying the request's `id`. As in Triton, a request that fails (a bad
//! request, an unknown model, an error in the model) is answered on the stream with `error_message` and its
//! `id`, model name and version, and the stream stays open; every response carries the
//! `triton_final_response` parameter (true: a model that is not decoupled answers each request once).
//!
//! A stream's requests run at once, up to `IN_FLIGHT`, and their responses leave in the order the requests
//! came, as Triton's are for models that are not decoupled. Past `IN_FLIGHT` the stream's next request is
//! not read until the oldest is answered and its response taken by the client, so a client that sends
//! without reading holds a bounded amount of server memory (HTTP/2 flow control stops it sending).

use std::sync::Arc;

use futures_util::{future, Stream, StreamExt};
use tonic::{Status, Streaming};

use super::convert;
use crate::proto::inference::{
    infer_parameter, InferParameter, ModelInferRequest, ModelInferResponse, ModelStreamInferResponse,
};
use crate::service::Service;

/// Requests of one stream answered at once, at most.
const IN_FLIGHT: usize = 64;

/// The response stream of the request stream `requests`. A transport error on the request stream (the client
/// went away, a malformed message) ends it.
pub fn responses(
    service: Arc<Service>,
    requests: Streaming<ModelInferRequest>,
) -> impl Stream<Item = Result<ModelStreamInferResponse, Status>> + Send {
    requests
        .take_while(|request| future::ready(request.is_ok()))
        .filter_map(|request| future::ready(request.ok()))
        .map(move |request| answer(service.clone(), request))
        .buffered(IN_FLIGHT)
        .map(Ok)
}

/// The stream message answering one request.
async fn answer(service: Arc<Service>, request: ModelInferRequest) -> ModelStreamInferResponse {
    let (id, model_name, model_version) =
        (request.id.clone(), request.model_name.clone(), request.model_version.clone());
    let outcome = match convert::request_from_proto(request) {
        Ok(request) => service.infer(request).await.map(convert::response_to_proto),
        Err(e) => Err(e),
    };
    match outcome {
        Ok(response) => final_message(response, String::new()),
        Err(e) => {
            let identity = ModelInferResponse { id, model_name, model_version, ..Default::default() };
            final_message(identity, Status::from(e).message().to_string())
        }
    }
}

/// `response` as the last (here: only) message for its request, with `error_message` when it failed.
fn final_message(mut response: ModelInferResponse, error_message: String) -> ModelStreamInferResponse {
    let last = InferParameter { parameter_choice: Some(infer_parameter::ParameterChoice::BoolParam(true)) };
    response.parameters.insert("triton_final_response".to_string(), last);
    ModelStreamInferResponse { error_message, infer_response: Some(response) }
}
