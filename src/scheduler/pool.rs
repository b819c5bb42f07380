//! A model version's instances (`instance_group` count). A request waits, in arrival order, for an idle
//! instance (a fair semaphore is the queue), then runs on it, in the caller's task (`executor::InFlight`):
//! a client that disconnects mid-request cannot abandon an instance half-way through a call, because the
//! rest of the call moves onto a task of its own, finishes, and the instance goes back to the pool; an
//! instance whose call panicked is retired.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::backends::Instance;
use crate::error::{Error, Result};
use crate::executor::InFlight;
use crate::inference::InferenceRequest;
use crate::observability::stats::Timing;
use crate::tensor::Tensor;

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

    /// Reserves an idle instance if one is idle now and nobody waits for one.
    pub fn try_reserve(&self) -> Option<Reservation> {
        self.shared.permits.clone().try_acquire_owned().ok().map(Reservation)
    }

    /// Executes the request on the reserved instance. `queue` in the answer is zero: the caller knows how
    /// long it waited.
    pub async fn run(&self, reservation: Reservation, request: InferenceRequest) -> Execution {
        let dequeued = Instant::now();
        let queue = Duration::ZERO;
        let mut lease = Lease::take(self.shared.clone(), reservation.0);
        let run = InFlight::new(async move {
            let started = Instant::now();
            let mut results = lease.instance().execute(vec![request]).await;
            let result = results.pop().unwrap_or_else(|| Err(Error::internal("the backend returned no result")));
            (result, started, started.elapsed())
        });
        match run.await {
            Ok((result, started, compute_infer)) => {
                let timing = Timing {
                    compute_input: started.duration_since(dequeued),
                    compute_infer,
                    compute_output: Duration::ZERO,
                };
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

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;

    fn request() -> InferenceRequest {
        InferenceRequest { model: "m".into(), ..InferenceRequest::default() }
    }

    struct Panicking;

    #[async_trait]
    impl Instance for Panicking {
        async fn execute(&mut self, _: Vec<InferenceRequest>) -> Vec<Result<Vec<Tensor>>> {
            panic!("boom")
        }
    }

    /// Takes 50 ms per call and counts the calls that ran to the end.
    struct Slow(Arc<AtomicUsize>);

    #[async_trait]
    impl Instance for Slow {
        async fn execute(&mut self, requests: Vec<InferenceRequest>) -> Vec<Result<Vec<Tensor>>> {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.0.fetch_add(1, Ordering::SeqCst);
            requests.iter().map(|_| Ok(Vec::new())).collect()
        }
    }

    #[tokio::test]
    async fn a_panicking_instance_fails_its_request_and_is_retired() {
        let pool = InstancePool::new("m:1", vec![Box::new(Panicking)]);
        let first = pool.execute(request()).await;
        let message = first.result.unwrap_err().to_string();
        assert!(message.contains("model 'm:1' failed while executing: panicked: boom"), "{message}");
        // Its only instance retired, the pool refuses what comes next instead of waiting for ever.
        let second = pool.execute(request()).await;
        assert!(matches!(second.result, Err(Error::Unavailable(_))), "{:?}", second.result);
    }

    #[tokio::test]
    async fn a_request_abandoned_mid_call_finishes_and_frees_its_instance() {
        let finished = Arc::new(AtomicUsize::new(0));
        let pool = InstancePool::new("m:1", vec![Box::new(Slow(finished.clone()))]);
        let abandoned = tokio::time::timeout(Duration::from_millis(10), pool.execute(request())).await;
        assert!(abandoned.is_err(), "the first call should still be running when its caller gives up");
        // The pool's one instance comes back once the abandoned call has run to its end.
        let next = tokio::time::timeout(Duration::from_secs(5), pool.execute(request())).await.expect("instance freed");
        assert!(next.result.is_ok());
        assert_eq!(finished.load(Ordering::SeqCst), 2);
    }
}
