//! Instances of native libraries (ONNX Runtime, libtorch, TensorFlow), whose calls block for as long as the
//! model computes. A call expected to be short runs in place, on the runtime thread that already has the
//! request in hand; a long one runs on a thread of the instance's own, so that it does not hold a runtime
//! thread, and the connections that thread serves, for its whole duration.
//!
//! Why both: handing a call to another thread costs two wake-ups (the instance thread, then the request's
//! task), and on a small virtual machine a wake-up of a sleeping thread is a round trip through the
//! hypervisor; while a request waits on another thread no runtime thread busy-polls either (`Waiting`).
//! Measured with bench/ab.py on 2 cores (docs/performance.md): in place, `simple_onnx` answers at HTTP
//! concurrency 1 in 104 µs instead of 190. A call of seconds in place would stall every connection of its
//! runtime thread, and with two such calls the whole server, so long calls still go to the thread.
//!
//! Which calls are long: each call's duration updates the instance's estimate, which rises at once to a
//! longer call and comes down a quarter of the way to a shorter one. A call runs in place while the
//! estimate is under `IN_PLACE_BELOW`; the first one, with nothing known yet, goes to the thread. The
//! library's state (`Runner`) belongs to the instance and travels with a call to the thread and back, so
//! it is never shared and needs no lock.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::oneshot;

use super::Instance;
use crate::error::{Error, LoadResult, Result};
use crate::executor::Waiting;
use crate::inference::InferenceRequest;
use crate::tensor::Tensor;

/// Calls expected to take less than this run in place. A runtime thread held this long delays the other
/// requests it serves by as much; handing a call off costs about a tenth of it.
const IN_PLACE_BELOW: Duration = Duration::from_millis(1);

/// A model instance's hold on its native library: what runs one request. It is moved to the instance's
/// thread for a long call and back afterwards, so it must be `Send`, and may assume nothing about which
/// thread calls it (thread-local library settings are set for each call).
pub trait Runner: Send + 'static {
    fn run(&mut self, request: &InferenceRequest) -> Result<Vec<Tensor>>;
}

/// The answers to one batch, the runner that produced them, and how long that took.
type Answered<R> = (R, Vec<Result<Vec<Tensor>>>, Duration);

/// One batch for the instance thread, with the runner to run it.
struct Job<R> {
    runner: R,
    requests: Vec<InferenceRequest>,
    reply: oneshot::Sender<Answered<R>>,
}

/// Makes the instance for `runner`, with its thread named `name`; `what` names the library in errors.
pub fn instance<R: Runner>(name: String, what: &'static str, runner: R) -> LoadResult<Box<dyn Instance>> {
    let (jobs, queue) = mpsc::channel::<Job<R>>();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            for Job { mut runner, requests, reply } in queue {
                let (results, took) = run_timed(&mut runner, &requests);
                let _ = reply.send((runner, results, took));
            }
        })
        .map_err(|e| format!("cannot start the instance thread: {e}"))?;
    Ok(Box::new(NativeInstance { runner: Some(runner), jobs, expected: None, what }))
}

fn run_timed<R: Runner>(runner: &mut R, requests: &[InferenceRequest]) -> (Vec<Result<Vec<Tensor>>>, Duration) {
    let start = Instant::now();
    let results = requests.iter().map(|request| runner.run(request)).collect();
    (results, start.elapsed())
}

struct NativeInstance<R> {
    /// None once a call panicked: the library's state is unknown, and every later call fails.
    runner: Option<R>,
    jobs: mpsc::Sender<Job<R>>,
    /// How long a call is expected to take; None before the first one.
    expected: Option<Duration>,
    what: &'static str,
}

impl<R: Runner> NativeInstance<R> {
    fn lost(&self, count: usize) -> Vec<Result<Vec<Tensor>>> {
        let what = self.what;
        (0..count).map(|_| Err(Error::internal(format!("the {what} instance stopped after a failure")))).collect()
    }

    /// Runs the batch here, on the calling thread. A panic loses the runner, as it would the thread.
    fn run_in_place(&mut self, mut runner: R, requests: &[InferenceRequest]) -> Vec<Result<Vec<Tensor>>> {
        match catch_unwind(AssertUnwindSafe(|| run_timed(&mut runner, requests))) {
            Ok((results, took)) => {
                self.learn(took);
                self.runner = Some(runner);
                results
            }
            Err(_) => self.lost(requests.len()),
        }
    }

    /// Runs the batch on the instance thread and waits for it without holding a runtime thread.
    async fn run_on_thread(&mut self, runner: R, requests: Vec<InferenceRequest>) -> Vec<Result<Vec<Tensor>>> {
        // The instance thread needs a CPU, and its answer comes without a socket: no runtime thread spins.
        let _waiting = Waiting::start();
        let count = requests.len();
        let (reply, answer) = oneshot::channel();
        if self.jobs.send(Job { runner, requests, reply }).is_err() {
            return self.lost(count);
        }
        match answer.await {
            Ok((runner, results, took)) => {
                self.learn(took);
                self.runner = Some(runner);
                results
            }
            Err(_) => self.lost(count),
        }
    }

    fn learn(&mut self, took: Duration) {
        self.expected = Some(updated_estimate(self.expected, took));
    }
}

/// The estimate after a call that took `took`: up to it at once, or a quarter of the way down.
fn updated_estimate(expected: Option<Duration>, took: Duration) -> Duration {
    match expected {
        Some(expected) if took < expected => expected - (expected - took) / 4,
        _ => took,
    }
}

#[async_trait]
impl<R: Runner> Instance for NativeInstance<R> {
    async fn execute(&mut self, requests: Vec<InferenceRequest>) -> Vec<Result<Vec<Tensor>>> {
        let Some(runner) = self.runner.take() else { return self.lost(requests.len()) };
        match self.expected {
            Some(expected) if expected < IN_PLACE_BELOW => self.run_in_place(runner, &requests),
            _ => self.run_on_thread(runner, requests).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DataType;

    /// Runs for the duration each request's id names (in µs), and says which thread it ran on.
    struct Sleeper;

    impl Runner for Sleeper {
        fn run(&mut self, request: &InferenceRequest) -> Result<Vec<Tensor>> {
            let micros: u64 = request.id.parse().unwrap();
            if micros == u64::MAX {
                panic!("a failing library");
            }
            std::thread::sleep(Duration::from_micros(micros));
            let thread = std::thread::current().name().unwrap_or("").to_string();
            let data = bytes::Bytes::from(thread.into_bytes());
            Ok(vec![Tensor { name: "THREAD".into(), datatype: DataType::Uint8, shape: vec![data.len() as i64], data }])
        }
    }

    fn request(micros: u64) -> Vec<InferenceRequest> {
        vec![InferenceRequest { id: micros.to_string(), ..Default::default() }]
    }

    async fn thread_of(instance: &mut Box<dyn Instance>, micros: u64) -> String {
        let mut results = instance.execute(request(micros)).await;
        let tensor = results.remove(0).unwrap().remove(0);
        String::from_utf8(tensor.data.to_vec()).unwrap()
    }

    #[test]
    fn the_estimate_rises_at_once_and_comes_down_a_quarter_of_the_way() {
        let ms = Duration::from_millis;
        assert_eq!(updated_estimate(None, ms(3)), ms(3));
        assert_eq!(updated_estimate(Some(ms(1)), ms(5)), ms(5));
        assert_eq!(updated_estimate(Some(ms(5)), ms(1)), ms(4));
        let mut expected = ms(5);
        let mut calls = 0;
        while expected >= IN_PLACE_BELOW {
            expected = updated_estimate(Some(expected), Duration::from_micros(10));
            calls += 1;
        }
        assert_eq!(calls, 6, "short calls bring a 5 ms estimate under the mark gradually");
    }

    // Which thread a call runs on follows from the measured durations, so the sleeps are far from the 1 ms
    // mark; a short call may still overrun it on a loaded machine, which the loops below allow for.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn short_calls_run_in_place_and_long_ones_on_the_instance_thread() {
        let mut instance = instance("sleeper".into(), "test", Sleeper).unwrap();
        assert_eq!(thread_of(&mut instance, 10).await, "sleeper", "the first call, unknown, goes to the thread");
        let mut calls = 1;
        while thread_of(&mut instance, 10).await == "sleeper" {
            calls += 1;
            assert!(calls < 30, "short calls come to run in place");
        }
        thread_of(&mut instance, 5000).await;
        assert_eq!(thread_of(&mut instance, 10).await, "sleeper", "expected long after a long call");
        let mut calls = 1;
        while thread_of(&mut instance, 10).await == "sleeper" {
            calls += 1;
            assert!(calls < 30, "short calls bring the estimate down");
        }
        assert!(calls > 3, "the estimate comes down gradually ({calls} calls)");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_panic_fails_its_requests_and_every_later_one() {
        let mut instance = instance("sleeper".into(), "test", Sleeper).unwrap();
        thread_of(&mut instance, 10).await;
        let failed = instance.execute(request(u64::MAX)).await;
        assert!(failed[0].as_ref().unwrap_err().to_string().contains("instance stopped"));
        let later = instance.execute(request(10)).await;
        assert!(later[0].as_ref().unwrap_err().to_string().contains("instance stopped"));
    }
}
