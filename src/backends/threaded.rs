//! Instances whose model runs on a thread of its own: a native library's call (ONNX Runtime, libtorch,
//! TensorFlow) blocks for as long as the model computes, so it must not run on the async runtime. Batches
//! reach the thread over a channel and their answers come back through a oneshot; the thread ends when the
//! instance is dropped.

use std::sync::mpsc;

use async_trait::async_trait;
use tokio::sync::oneshot;

use super::Instance;
use crate::error::{Error, LoadResult, Result};
use crate::executor::Waiting;
use crate::inference::InferenceRequest;
use crate::tensor::Tensor;

/// One batch for the thread, and where its answers go.
pub struct Job {
    requests: Vec<InferenceRequest>,
    reply: oneshot::Sender<Vec<Result<Vec<Tensor>>>>,
}

impl Job {
    /// Runs each request with `run` and sends the answers back.
    pub fn answer(self, mut run: impl FnMut(&InferenceRequest) -> Result<Vec<Tensor>>) {
        let results = self.requests.iter().map(&mut run).collect();
        let _ = self.reply.send(results);
    }
}

/// Starts the thread `name` running `body` over the instance's jobs; `what` names the library in errors.
pub fn spawn(
    name: String,
    what: &'static str,
    body: impl FnOnce(mpsc::Receiver<Job>) + Send + 'static,
) -> LoadResult<Box<dyn Instance>> {
    let (jobs, queue) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || body(queue))
        .map_err(|e| format!("cannot start the instance thread: {e}"))?;
    Ok(Box::new(ThreadedInstance { jobs, what }))
}

struct ThreadedInstance {
    jobs: mpsc::Sender<Job>,
    what: &'static str,
}

#[async_trait]
impl Instance for ThreadedInstance {
    async fn execute(&mut self, requests: Vec<InferenceRequest>) -> Vec<Result<Vec<Tensor>>> {
        // The instance thread needs a CPU, and its answer comes without a socket: no runtime thread spins.
        let _waiting = Waiting::start();
        let (reply, answer) = oneshot::channel();
        let count = requests.len();
        let what = self.what;
        let lost = || (0..count).map(|_| Err(Error::internal(format!("the {what} instance thread stopped")))).collect();
        if self.jobs.send(Job { requests, reply }).is_err() {
            return lost();
        }
        answer.await.unwrap_or_else(|_| lost())
    }
}
