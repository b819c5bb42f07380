//! Moves requests from the async frontends to backend instances. Each model version has one queue and a
//! pool of instances (`instance_group` count), each on its own OS thread, because backends execute
//! synchronously (a Wasm call, an ONNX Runtime run) and must not block the async runtime. An idle instance
//! takes the next request from the shared queue; the answer goes back through a oneshot channel.

use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use tokio::sync::oneshot;

use crate::backends::Instance;
use crate::error::{Error, Result};
use crate::inference::InferenceRequest;
use crate::tensor::Tensor;

struct Job {
    request: InferenceRequest,
    reply: oneshot::Sender<Result<Vec<Tensor>>>,
}

pub struct InstancePool {
    queue: Option<Sender<Job>>,
    workers: Vec<JoinHandle<()>>,
}

impl InstancePool {
    /// Starts one worker thread per instance; `label` ("model:version") names the threads.
    pub fn start(label: &str, instances: Vec<(String, Box<dyn Instance>)>) -> std::io::Result<Self> {
        let (queue, jobs) = crossbeam_channel::unbounded();
        let workers = instances
            .into_iter()
            .map(|(name, instance)| {
                let jobs = jobs.clone();
                std::thread::Builder::new()
                    .name(format!("{label}/{name}"))
                    .spawn(move || serve(instance, jobs))
            })
            .collect::<std::io::Result<_>>()?;
        Ok(InstancePool { queue: Some(queue), workers })
    }

    /// Queues the request and waits for an instance to execute it.
    pub async fn execute(&self, request: InferenceRequest) -> Result<Vec<Tensor>> {
        let (reply, answer) = oneshot::channel();
        let queue = self.queue.as_ref().expect("the queue lives until drop");
        queue
            .send(Job { request, reply })
            .map_err(|_| Error::Unavailable("the model is being unloaded".into()))?;
        answer.await.map_err(|_| Error::internal("the model instance stopped before answering"))?
    }
}

impl Drop for InstancePool {
    /// Closes the queue, lets the instances finish what was queued, finalise and exit.
    fn drop(&mut self) {
        self.queue = None;
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

/// One instance's loop: execute requests until the queue closes, then finalise.
fn serve(mut instance: Box<dyn Instance>, jobs: Receiver<Job>) {
    for job in jobs.iter() {
        if job.reply.is_closed() {
            continue; // the client went away while the request was queued
        }
        let mut results = instance.execute(std::slice::from_ref(&job.request));
        let result = results.pop().unwrap_or_else(|| Err(Error::internal("the backend returned no result")));
        let _ = job.reply.send(result);
    }
    instance.finalize();
}
