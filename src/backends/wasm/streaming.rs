//! `tessera:backend/streaming`: how a decoupled model's plugin answers a request with many responses. During
//! an `execute` call the store holds the responders of the call's requests (`StoreState::responders`);
//! `sender(index)` gives the plugin a `response-sender` handle over one of them, which it may keep past the
//! call. Sends go to the request's bounded buffer (`inference::responder`), so a slow client makes the
//! plugin wait in `send`, within its execute deadline, rather than the server buffer without end.

use std::time::Instant;

use wasmtime::component::Resource;

use super::bindings::tessera::backend::{streaming, types};
use super::convert;
use super::state::StoreState;
use crate::error::Error;
use crate::inference::{Responder, SendError};

/// What a `response-sender` handle stands for.
pub struct SenderHandle(Responder);

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
}

impl streaming::HostResponseSender for StoreState {
    async fn send(
        &mut self,
        handle: Resource<SenderHandle>,
        response: Option<types::Response>,
        last: bool,
    ) -> wasmtime::Result<Result<(), String>> {
        let responder = self.table.get(&handle)?.0.clone();
        let outputs = match response {
            Some(response) => Some(
                response
                    .outputs
                    .into_iter()
                    .map(|t| convert::tensor_from_wit(self, t))
                    .collect::<wasmtime::Result<Vec<_>>>()?,
            ),
            None => None,
        };
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

/// Sends one message, waiting for room in the buffer no later than the plugin's deadline (the plugin's own
/// deadline cannot fire while the host waits: no guest code runs to see the epoch).
async fn deliver(
    responder: &Responder,
    deadline: Option<Instant>,
    outputs: crate::error::Result<Option<Vec<crate::tensor::Tensor>>>,
    last: bool,
) -> Result<(), String> {
    let send = responder.send(outputs, last);
    let sent = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline.into(), send).await {
            Ok(sent) => sent,
            Err(_) => return Err("the client did not take the response before this plugin's execute timeout".into()),
        },
        None => send.await,
    };
    sent.map_err(|e: SendError| e.to_string())
}
