//! Requests to decoupled models (`model_transaction_policy { decoupled: true }`), which answer with any
//! number of responses. The request runs alone on an idle instance, as in the `Direct` strategy (the
//! dynamic batcher merges requests into one, which would lose whose response is whose), carrying a
//! `Responder`, or through the steps of a decoupled ensemble, which sends to the responder itself; the
//! responses come back through the responder's buffer, and `responses` turns that buffer into the request's
//! response stream, each response's outputs selected as the request asked.

use std::time::Instant;

use futures_util::stream::{self, BoxStream, StreamExt};
use tokio::sync::mpsc;

use super::{Scheduler, Strategy};
use crate::error::Error;
use crate::inference::{InferenceRequest, InferenceResponse, Partial, Responder, Streamed};
use crate::tensor::Tensor;

impl Scheduler {
    pub fn is_decoupled(&self) -> bool {
        self.decoupled
    }

    /// Checks and executes one request of a decoupled model, its responses going to `responder`; returns
    /// when the model's `execute` has returned (responses may still follow). A request the checks refuse,
    /// or whose execution fails, is ended with that error. Counted once in the statistics, as a success
    /// when the execution succeeded.
    pub async fn execute_decoupled(&self, mut request: InferenceRequest, responder: Responder) {
        let arrived = Instant::now();
        self.stats.started();
        let trace = request.trace.clone();
        if let Some(trace) = &trace {
            self.record_start(trace, &request, arrived);
        }
        let mut compute = None;
        let (result, queue) = match (&self.strategy, self.signature.check_request(&request)) {
            (_, Err(e)) => (Err(e), Default::default()),
            (Strategy::Direct(pool), Ok(())) => {
                let batch_size = self.batch_size(&request);
                request.responder = Some(responder.clone());
                let execution = pool.execute(request).await;
                if let (Ok(_), Some(timing)) = (&execution.result, execution.timing) {
                    self.stats.executed(batch_size, &timing);
                }
                compute = execution.timing;
                (execution.result, execution.queue)
            }
            (Strategy::Sequence(sequencer, _), Ok(())) => {
                // The sequence batcher runs a decoupled model's requests one per execution, and records them.
                let batch_size = self.batch_size(&request);
                request.responder = Some(responder.clone());
                let answer = sequencer.submit(request, batch_size).await;
                compute = answer.compute;
                (answer.result, answer.queue)
            }
            (Strategy::Ensemble(ensemble), Ok(())) => {
                let wanted = self.signature.output_names(&request.requested_outputs);
                (ensemble.run_decoupled(request, &wanted, &responder).await.map(|()| Vec::new()), Default::default())
            }
            (Strategy::Dynamic(..), Ok(())) => {
                let message = format!("model '{}' is decoupled but scheduled by the dynamic batcher", self.name);
                (Err(Error::internal(message)), Default::default())
            }
        };
        self.stats.finished(result.is_ok(), arrived.elapsed(), queue);
        if let Some(trace) = trace {
            // The model's `execute` has returned; responses it sends later are the frontend's to note.
            super::record_compute(&trace, compute.as_ref(), arrived + queue, Instant::now());
            trace.timestamp("REQUEST_END", Instant::now());
        }
        if let Err(e) = result {
            responder.fail(e).await;
        }
    }

    /// A response the model sent for request `id`, its outputs selected as `requested`.
    fn streamed(&self, partial: Partial, id: &str, requested: &[String]) -> Streamed {
        let response = partial.outputs.and_then(|outputs| match outputs {
            None => Ok(None),
            Some(outputs) => self.select(outputs, requested, id).map(Some),
        });
        Streamed { response, last: partial.last }
    }

    fn select(&self, outputs: Vec<Tensor>, requested: &[String], id: &str) -> crate::error::Result<InferenceResponse> {
        let outputs = self.signature.select_outputs(requested, outputs)?;
        Ok(InferenceResponse { model: self.name.clone(), version: self.version, id: id.to_string(), outputs })
    }
}

/// The response stream of one decoupled request: what the model sends to `receiver`, up to and including
/// the final message. A model that lets go of the request without a final message (its instance trapped,
/// every sender dropped) ends the stream with an error. `scheduler` (something that holds the model version,
/// keeping it loaded) stays alive as long as the stream.
pub fn responses<S>(
    scheduler: S,
    receiver: mpsc::Receiver<Partial>,
    id: String,
    requested: Vec<String>,
) -> BoxStream<'static, Streamed>
where
    S: AsRef<Scheduler> + Send + 'static,
{
    let state = Some((scheduler, receiver, id, requested));
    stream::unfold(state, |state| async move {
        let (scheduler, mut receiver, id, requested) = state?;
        match receiver.recv().await {
            Some(partial) => {
                let streamed = scheduler.as_ref().streamed(partial, &id, &requested);
                let next = (!streamed.last).then_some((scheduler, receiver, id, requested));
                Some((streamed, next))
            }
            None => {
                let model = &scheduler.as_ref().name;
                let error = Error::internal(format!("model '{model}' released the request without a final response"));
                Some((Streamed { response: Err(error), last: true }, None))
            }
        }
    })
    .boxed()
}
