//! `tessera:backend/streaming`: how a decoupled model's plugin answers a request with many responses, and how
//! any plugin reads the many responses of a decoupled model it calls. During an `execute` call the store
//! holds the responders of the call's requests (`StoreState::responders`); `sender(index)` gives the plugin a
//! `response-sender` handle over one of them, which it may keep past the call. Sends go to the request's
//! bounded buffer (`inference::responder`), so a slow client makes the plugin wait in `send`, within its
//! execute deadline, rather than the server buffer without end. `infer-stream` starts a call through the
//! server's schedulers, as BLS `infer` does, and its `response-stream` handle reads the responses in order.

use std::time::Instant;

use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use wasmtime::component::Resource;

use super::bindings::tessera::backend::{streaming, types};
use super::state::StoreState;
use super::{convert, limits};
use crate::error::Error;
use crate::inference::{Responder, SendError, Streamed};

/// What a `response-sender` handle stands for.
pub struct SenderHandle(Responder);

/// What a `response-stream` handle stands for: the call's responses, `None` once the last was read (or while
/// `next` waits for one).
pub struct CallStream(Option<BoxStream<'static, Streamed>>);

impl streaming::Host for StoreState {
    async fn sender(&mut self, index: u32) -> wasmtime::Result<Result<Resource<SenderHandle>, String>> {
        let responder = match self.responders.get(index as usize) {
            Some(Some(responder)) => responder.clone(),
            Some(None) => {
                return Ok(Err(format!(
                    "model '{}' is not decoupled: set model_transaction_policy {{ decoupled: true }} in its \
                     config to answer through response senders",
                    self.label
                )))
            }
            None => {
                let count = self.responders.len();
                return Ok(Err(format!("no request {index}: the running execute call has {count} requests")));
            }
        };
        Ok(Ok(self.table.push(SenderHandle(responder))?))
    }

    async fn infer_stream(
        &mut self,
        model: String,
        version: String,
        request: types::Request,
    ) -> wasmtime::Result<Result<Resource<CallStream>, String>> {
        let request = convert::request_from_wit(self, model, version, request)?;
        let Some(caller) = self.caller() else {
            return Ok(Err("the server is not accepting calls between models yet".into()));
        };
        Ok(match caller.infer_stream(request) {
            Ok(answers) => Ok(self.table.push(CallStream(Some(answers.messages)))?),
            Err(e) => Err(e.to_string()),
        })
    }
}

impl streaming::HostResponseStream for StoreState {
    async fn next(
        &mut self,
        handle: Resource<CallStream>,
    ) -> wasmtime::Result<Option<Result<types::Response, String>>> {
        // Taken out of the table while waiting (the store cannot stay borrowed across the wait); put back
        // unless that was the last response.
        let Some(mut messages) = self.table.get_mut(&handle)?.0.take() else { return Ok(None) };
        let Some(message) = limits::by_deadline(self.deadline, messages.next()).await else {
            return Ok(Some(Err("the callee did not answer before this plugin's execute timeout".into())));
        };
        let Some(Streamed { response, last }) = message else { return Ok(None) };
        if !last {
            self.table.get_mut(&handle)?.0 = Some(messages);
        }
        Ok(Some(match response {
            Ok(response) => Ok(convert::response_to_wit(self, response.map(|r| r.outputs).unwrap_or_default())?),
            Err(e) => Err(e.to_string()),
        }))
    }

    async fn drop(&mut self, handle: Resource<CallStream>) -> wasmtime::Result<()> {
        self.table.delete(handle)?;
        Ok(())
    }
}

impl streaming::HostResponseSender for StoreState {
    async fn send(
        &mut self,
        handle: Resource<SenderHandle>,
        response: Option<types::Response>,
        last: bool,
    ) -> wasmtime::Result<Result<(), String>> {
        let responder = self.table.get(&handle)?.0.clone();
        let outputs = response.map(|response| convert::response_from_wit(self, response)).transpose()?;
        Ok(deliver(&responder, self.deadline, Ok(outputs), last).await)
    }

    async fn send_error(
        &mut self,
        handle: Resource<SenderHandle>,
        message: String,
        last: bool,
    ) -> wasmtime::Result<Result<(), String>> {
        let responder = self.table.get(&handle)?.0.clone();
        let error = Error::internal(format!("model '{}': {message}", self.label));
        Ok(deliver(&responder, self.deadline, Err(error), last).await)
    }

    async fn is_cancelled(&mut self, handle: Resource<SenderHandle>) -> wasmtime::Result<bool> {
        Ok(self.table.get(&handle)?.0.is_cancelled())
    }

    async fn drop(&mut self, handle: Resource<SenderHandle>) -> wasmtime::Result<()> {
        self.table.delete(handle)?;
        Ok(())
    }
}

/// Sends one message, waiting for room in the buffer no later than the plugin's deadline.
async fn deliver(
    responder: &Responder,
    deadline: Option<Instant>,
    outputs: crate::error::Result<Option<Vec<crate::tensor::Tensor>>>,
    last: bool,
) -> Result<(), String> {
    let Some(sent) = limits::by_deadline(deadline, responder.send(outputs, last)).await else {
        return Err("the client did not take the response before this plugin's execute timeout".into());
    };
    sent.map_err(|e: SendError| e.to_string())
}
