//! Moves requests to backend instances. Each model version has a pool of instances (`instance_group`
//! count); a request waits, in arrival order, for an idle instance (a fair semaphore is the queue), then
//! runs on it. The execution is spawned as a task of its own so that a client that disconnects mid-request
//! cannot abandon an instance half-way through a call: the call finishes and the instance goes back to
//! the pool. Spawned from a runtime thread, that task runs next on the same thread, so no hand-off to
//! another thread happens on the way.

pub mod batcher;
pub mod queue;
pub mod stats;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::backends::Instance;
use crate::error::{Error, Result};
use crate::inference::InferenceRequest;
use crate::tensor::Tensor;
use stats::Timing;

/// What became of one request in the pool.
pub struct Execution {
    pub result: Result<Vec<Tensor>>,
    /// Time spent waiting for an instance.
    pub queue: Duration,
    /// Set when an instance executed the request; `compute_output` is left for the caller to fill.
    pub timing: Option<Timing>,
}

pub struct InstancePool {
    label: String,
    shared: Arc<Shared>,
}

struct Shared {
    idle: Mutex<Vec<Box<dyn Instance>>>,
    /// One permit per idle instance; waiting on it is waiting in the queue.
    permits: Arc<Semaphore>,
    /// Instances not retired after a host panic; when none remain, the queue closes.
    live: AtomicUsize,
}

impl InstancePool {
    /// `label` ("model:version") names the pool in errors.
    pub fn new(label: &str, instances: Vec<Box<dyn Instance>>) -> Self {
        let count = instances.len();
        InstancePool {
            label: label.to_string(),
            shared: Arc::new(Shared {
                idle: Mutex::new(instances),
                permits: Arc::new(Semaphore::new(count)),
                live: AtomicUsize::new(count),
            }),
        }
    }

    /// "model:version", for messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Waits for an idle instance and executes the request on it, timing each stage.
    pub async fn execute(&self, request: InferenceRequest) -> Execution {
        let queued = Instant::now();
        match self.reserve().await {
            Ok(reservation) => {
                let queue = queued.elapsed();
                Execution { queue, ..self.run(reservation, request).await }
            }
            Err(e) => Execution { result: Err(e), queue: queued.elapsed(), timing: None },
        }
    }

    /// Waits, in arrival order, until an instance is idle and reserves it.
    pub async fn reserve(&self) -> Result<Reservation> {
        let permit = self.shared.permits.clone().acquire_owned().await.map_err(|_| self.closed())?;
        Ok(Reservation(permit))
    }

    /// Executes the request on the reserved instance. `queue` in the answer is zero: the caller knows how
    /// long it waited.
    pub async fn run(&self, reservation: Reservation, request: InferenceRequest) -> Execution {
        let dequeued = Instant::now();
        let queue = Duration::ZERO;
        let mut lease = Lease::take(self.shared.clone(), reservation.0);
        let run = tokio::spawn(async move {
            let started = Instant::now();
            let mut results = lease.instance().execute(std::slice::from_ref(&request)).await;
            let result = results.pop().unwrap_or_else(|| Err(Error::internal("the backend returned no result")));
            (result, started, started.elapsed())
        });
        match run.await {
            Ok((result, started, compute_infer)) => {
                let timing =
                    Timing { compute_input: started.duration_since(dequeued), compute_infer, compute_output: Duration::ZERO };
                Execution { result, queue, timing: Some(timing) }
            }
            Err(e) => Execution {
                result: Err(Error::internal(format!("model '{}' failed while executing: {e}", self.label))),
                queue,
                timing: None,
            },
        }
    }

    /// Waits for every in-flight request, then finalises each instance. Later requests are refused.
    pub async fn shutdown(&self) {
        let count = self.shared.live.load(Ordering::Acquire) as u32;
        if let Ok(all) = self.shared.permits.acquire_many(count).await {
            all.forget();
        }
        self.shared.permits.close();
        let instances = std::mem::take(&mut *self.shared.idle.lock().expect("pool lock"));
        for mut instance in instances {
            instance.finalize().await;
        }
    }

    fn closed(&self) -> Error {
        Error::Unavailable(format!("model '{}' is unloading or has no working instance left", self.label))
    }
}

/// The right to the next idle instance of a pool.
pub struct Reservation(OwnedSemaphorePermit);

/// An instance taken from the pool for one execution, given back when dropped.
struct Lease {
    shared: Arc<Shared>,
    instance: Option<Box<dyn Instance>>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Lease {
    fn take(shared: Arc<Shared>, permit: OwnedSemaphorePermit) -> Self {
        let instance = shared.idle.lock().expect("pool lock").pop().expect("a permit is held for every idle instance");
        Lease { shared, instance: Some(instance), permit: Some(permit) }
    }

    fn instance(&mut self) -> &mut dyn Instance {
        self.instance.as_deref_mut().expect("present until drop")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let instance = self.instance.take().expect("present until drop");
        let permit = self.permit.take().expect("present until drop");
        if std::thread::panicking() {
            // The instance may be half-way through a call: retire it, and its permit with it.
            drop(instance);
            permit.forget();
            if self.shared.live.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.shared.permits.close();
            }
            return;
        }
        self.shared.idle.lock().expect("pool lock").push(instance);
        drop(permit);
    }
}
