//! The responses of one request to a decoupled model (`model_transaction_policy { decoupled: true }`): zero,
//! one or many, sent by the model over time, then a final flag. The scheduler makes a `Responder` and its
//! receiving end for each such request; the responder travels with the request to the backend, which sends
//! through it (a Wasm plugin through its `response-sender` handles), and the frontend reads the other end.
//!
//! The buffer between them is small and bounded: a model that sends faster than its client reads waits in
//! `send`, so a client that stops reading holds `BUFFERED` responses of server memory per request, not more.
//! A client that goes away drops the receiving end; every send after that fails, and the model can ask
//! `is_cancelled` to stop early.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Responses buffered per request before `send` waits for the client.
const BUFFERED: usize = 16;

/// One message from the model: a response's outputs (`None`: only the flag), or an error, and whether it
/// is the request's last.
#[derive(Debug)]
pub struct Partial {
    pub outputs: Result<Option<Vec<Tensor>>>,
    pub last: bool,
}

/// The sending end for one request. Clones send to the same request and share whether it is complete.
#[derive(Clone)]
pub struct Responder(Arc<Shared>);

struct Shared {
    sender: mpsc::Sender<Partial>,
    complete: AtomicBool,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder").field("complete", &self.is_complete()).finish()
    }
}

/// Why a send delivered nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The request already had its final response (or was ended at its timeout).
    Complete,
    /// The client has gone away.
    Cancelled,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SendError::Complete => "the request is already complete: nothing can be sent after its final response",
            SendError::Cancelled => "the request was cancelled: its client has gone away",
        })
    }
}

impl Responder {
    /// A responder and the receiving end of its responses.
    pub fn channel() -> (Responder, mpsc::Receiver<Partial>) {
        let (sender, receiver) = mpsc::channel(BUFFERED);
        (Responder(Arc::new(Shared { sender, complete: AtomicBool::new(false) })), receiver)
    }

    /// Sends one message, waiting while the buffer is full; `last` completes the request.
    pub async fn send(&self, outputs: Result<Option<Vec<Tensor>>>, last: bool) -> Result<(), SendError> {
        if self.is_complete() {
            return Err(SendError::Complete);
        }
        if self.is_cancelled() {
            return Err(SendError::Cancelled);
        }
        // Claimed before sending, so that of two final sends racing only one goes out.
        if last && self.0.complete.swap(true, Ordering::AcqRel) {
            return Err(SendError::Complete);
        }
        self.0.sender.send(Partial { outputs, last }).await.map_err(|_| SendError::Cancelled)
    }

    /// Ends the request with `error`, unless it is complete already.
    pub async fn fail(&self, error: Error) {
        // Either outcome is fine: complete already, or nobody is listening any more.
        let _ = self.send(Err(error), true).await;
    }

    pub fn is_complete(&self) -> bool {
        self.0.complete.load(Ordering::Acquire)
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.sender.is_closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_final_send_completes_the_request_and_later_sends_fail() {
        let (responder, mut receiver) = Responder::channel();
        responder.send(Ok(Some(Vec::new())), false).await.unwrap();
        responder.send(Ok(None), true).await.unwrap();
        assert_eq!(responder.send(Ok(None), false).await, Err(SendError::Complete));
        assert!(!receiver.recv().await.unwrap().last);
        assert!(receiver.recv().await.unwrap().last);
    }

    #[tokio::test]
    async fn sends_to_a_vanished_client_fail_as_cancelled() {
        let (responder, receiver) = Responder::channel();
        drop(receiver);
        assert!(responder.is_cancelled());
        assert_eq!(responder.send(Ok(None), true).await, Err(SendError::Cancelled));
    }
}
