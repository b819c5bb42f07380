//! Moves requests to backend instances. Every model version has one `Scheduler`, as in Triton's core: it
//! checks each request against the version's signature, hands it to the version's scheduling strategy,
//! keeps the outputs the request asked for (ranked into classes where it asks), and records the request's
//! statistics, all in one place. The strategies sit side by side behind `Scheduler::infer`: `Direct` (each request waits for an idle instance
//! of the `pool` and runs alone), `Dynamic` (the `batcher` merges queued requests into batches) and
//! `Ensemble` (the `ensemble` runs steps over other models) and `Sequence` (the `sequence` batcher keeps each
//! sequence on one instance, in order, with its controls and states). Decoupled
//! models, whose requests have many responses, run each request alone (`decoupled`). A model that enables the
//! response cache is answered from it before any strategy runs (`cache`).

pub mod batcher;
pub mod cache;
mod decoupled;
mod ensemble;
mod pool;
pub mod queue;
mod sequence;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use decoupled::responses;
pub use pool::{InstancePool, Reservation};

use crate::backends::{Instance, Peers};
use crate::error::{Error, LoadResult, Result};
use crate::inference::{classification, InferenceRequest, InferenceResponse, Signature};
use crate::model_config::{self, ModelConfig};
use crate::observability::stats::{Stats, Timing};
use crate::observability::trace;
use crate::proto::inference::ModelStatistics;
use crate::tensor::Tensor;
use batcher::Batcher;
use cache::ResponseCache;
use ensemble::Ensemble;
use sequence::Sequencer;

/// How a model version runs its requests.
enum Strategy {
    /// One request per execution, in arrival order.
    Direct(Arc<InstancePool>),
    /// Triton's dynamic batcher, over the pool it executes batches on.
    Dynamic(Batcher, Arc<InstancePool>),
    /// Steps over other models (`platform: "ensemble"`); no instances of its own.
    Ensemble(Ensemble),
    /// Triton's sequence batcher, over one pool per instance (a sequence stays on its instance).
    Sequence(Sequencer, Vec<Arc<InstancePool>>),
}

/// The scheduler of one model version.
pub struct Scheduler {
    name: String,
    version: i64,
    signature: Signature,
    strategy: Strategy,
    stats: Arc<Stats>,
    /// Whether the model answers through responders (`decoupled`) rather than with one response.
    decoupled: bool,
    /// Where answers are kept and looked up, for a model that enables the response cache.
    cache: Option<Arc<ResponseCache>>,
}

impl Scheduler {
    /// The scheduler `config` asks for, over `instances`, recording into `stats`. Background work (the
    /// batching tasks) runs on `runtime`. `model_dir` is where a sequence batcher's initial states are read
    /// from (`None` for a version served from code).
    pub fn new(
        runtime: &tokio::runtime::Handle,
        config: &ModelConfig,
        (version, model_dir): (i64, Option<&Path>),
        signature: Signature,
        instances: Vec<Box<dyn Instance>>,
        stats: Arc<Stats>,
    ) -> LoadResult<Self> {
        let label = format!("{}:{version}", config.name);
        let decoupled = model_config::is_decoupled(config);
        let sequence = model_config::sequence::settings(config)?
            .map(|mut settings| settings.read_initial_files(model_dir).map(|()| settings))
            .transpose()?;
        let strategy = if let Some(settings) = sequence {
            let lanes: Vec<Arc<InstancePool>> = instances
                .into_iter()
                .enumerate()
                .map(|(i, instance)| Arc::new(InstancePool::new(&format!("{label}/{i}"), vec![instance])))
                .collect();
            let sequencer = Sequencer::start(runtime, &config.name, settings, lanes.clone(), stats.clone());
            Strategy::Sequence(sequencer, lanes)
        } else {
            let pool = Arc::new(InstancePool::new(&label, instances));
            match batcher::Policy::from_config(config).filter(|_| !decoupled) {
                Some(policy) => Strategy::Dynamic(Batcher::start(runtime, policy, pool.clone(), stats.clone()), pool),
                None => Strategy::Direct(pool),
            }
        };
        Ok(Scheduler { name: config.name.clone(), version, signature, strategy, stats, decoupled, cache: None })
    }

    /// The scheduler of an ensemble (`config` is a validated ensemble config): its steps reach the composing
    /// models through `peers`.
    pub fn ensemble(config: &ModelConfig, version: i64, signature: Signature, peers: Peers, stats: Arc<Stats>) -> Self {
        let strategy = Strategy::Ensemble(Ensemble::from_config(config, peers));
        let decoupled = model_config::is_decoupled(config);
        Scheduler { name: config.name.clone(), version, signature, strategy, stats, decoupled, cache: None }
    }

    /// The same scheduler, answering requests it has answered before from `cache`.
    pub fn with_cache(self, cache: Arc<ResponseCache>) -> Self {
        Scheduler { cache: Some(cache), ..self }
    }

    /// Checks, schedules and executes one request; every request is counted once, success or failure. A
    /// decoupled model's requests go through `execute_decoupled` instead.
    pub async fn infer(&self, request: InferenceRequest) -> Result<InferenceResponse> {
        if self.decoupled {
            return Err(Error::Unimplemented(format!(
                "model '{}' is decoupled: its responses can only be received on a stream",
                self.name
            )));
        }
        let arrived = Instant::now();
        self.stats.started();
        let trace = request.trace.clone();
        if let Some(trace) = &trace {
            self.record_start(trace, &request, arrived);
        }
        let outcome = match &self.cache {
            Some(cache) => self.run_cached(cache, request, arrived).await,
            None => self.run(request).await,
        };
        let computed = Instant::now();
        self.stats.finished(outcome.result.is_ok(), arrived.elapsed(), outcome.queue);
        if let Some(trace) = trace {
            record_compute(&trace, outcome.compute.as_ref(), arrived + outcome.queue, computed);
            if let Ok(response) = &outcome.result {
                trace.tensors("TENSOR_BACKEND_OUTPUT", &response.outputs);
            }
            trace.timestamp("REQUEST_END", Instant::now());
        }
        outcome.result
    }

    /// Records in a request's trace that it reached this scheduler at `arrived` and was queued.
    fn record_start(&self, trace: &trace::Trace, request: &InferenceRequest, arrived: Instant) {
        trace.start(&self.name, self.version, &request.id, arrived);
        trace.timestamp("QUEUE_START", arrived);
        trace.tensors("TENSOR_QUEUE_INPUT", &request.inputs);
    }

    /// Answers from `cache` when it holds the answer (a hit spends no time queued), else runs the request
    /// and keeps its answer if it succeeded; the time spent looking up and storing is the hit's or miss's.
    async fn run_cached(
        &self,
        cache: &ResponseCache,
        request: InferenceRequest,
        arrived: Instant,
    ) -> Outcome<InferenceResponse> {
        let key = cache::key(&self.name, self.version, &request);
        if let Some(mut answer) = cache.get(&key) {
            answer.id = request.id;
            self.stats.cache_hit(arrived.elapsed());
            return Outcome::unexecuted(Ok(answer), Duration::ZERO);
        }
        let lookup = arrived.elapsed();
        let outcome = self.run(request).await;
        if let Ok(answer) = &outcome.result {
            let storing = Instant::now();
            cache.insert(key, answer);
            self.stats.cache_miss(lookup + storing.elapsed());
        }
        outcome
    }

    /// Whether requests run in the order they reach the scheduler (the sequence batcher's).
    pub fn is_sequential(&self) -> bool {
        matches!(self.strategy, Strategy::Sequence(..))
    }

    pub fn statistics(&self) -> ModelStatistics {
        self.stats.snapshot(&self.name, self.version)
    }

    /// Finishes in-flight requests and finalises every instance.
    pub async fn shutdown(&self) {
        match &self.strategy {
            Strategy::Direct(pool) | Strategy::Dynamic(_, pool) => pool.shutdown().await,
            Strategy::Sequence(_, lanes) => {
                for pool in lanes {
                    pool.shutdown().await;
                }
            }
            Strategy::Ensemble(_) => {}
        }
    }

    /// Checks, queues and executes one request; also returns its time in the queue and its execution's.
    async fn run(&self, mut request: InferenceRequest) -> Outcome<InferenceResponse> {
        if let Err(e) = self.signature.check_request(&request) {
            return Outcome::unexecuted(Err(e), Duration::ZERO);
        }
        let wishes = match request.scheduling_wishes() {
            Ok(wishes) => wishes,
            Err(e) => return Outcome::unexecuted(Err(e), Duration::ZERO),
        };
        let id = request.id.clone();
        let requested = request.requested_outputs.clone();
        let class_counts = std::mem::take(&mut request.class_counts);
        let batch_size = self.batch_size(&request);
        let Outcome { result, queue, compute } = match &self.strategy {
            Strategy::Dynamic(batcher, _) => {
                self.selected(batcher.submit(request, batch_size, wishes).await, &requested)
            }
            Strategy::Sequence(sequencer, _) => self.selected(sequencer.submit(request, batch_size).await, &requested),
            Strategy::Direct(pool) => self.execute_alone(pool, request, &requested, batch_size).await,
            Strategy::Ensemble(ensemble) => self.run_ensemble(ensemble, request, &requested, batch_size).await,
        };
        let result = match class_counts.is_empty() {
            true => result,
            false => result.and_then(|outputs| {
                classification::classify(
                    outputs,
                    &class_counts,
                    &self.signature.labels,
                    self.signature.max_batch_size > 0,
                )
            }),
        };
        let result =
            result.map(|outputs| InferenceResponse { model: self.name.clone(), version: self.version, id, outputs });
        Outcome { result, queue, compute }
    }

    /// A batcher's answer with the request's requested outputs selected.
    fn selected(&self, answer: batcher::Answer, requested: &[String]) -> Outcome<Vec<Tensor>> {
        let result = answer.result.and_then(|produced| self.signature.select_outputs(requested, produced));
        Outcome { result, queue: answer.queue, compute: answer.compute }
    }

    /// Runs one request on its own and selects its outputs, recording the execution with the selection
    /// as its output stage.
    async fn execute_alone(
        &self,
        pool: &InstancePool,
        request: InferenceRequest,
        requested: &[String],
        batch_size: u64,
    ) -> Outcome<Vec<Tensor>> {
        let execution = pool.execute(request).await;
        let output_started = Instant::now();
        let result = execution.result.and_then(|produced| self.signature.select_outputs(requested, produced));
        let compute = execution.timing.map(|timing| Timing { compute_output: output_started.elapsed(), ..timing });
        if let Some(timing) = &compute {
            self.stats.executed(batch_size, timing);
        }
        Outcome { result, queue: execution.queue, compute }
    }

    /// Runs an ensemble request's steps and selects its outputs. As in Triton, a successful ensemble request
    /// counts as one execution of its batch size; its compute time is the whole run (the steps' own time is
    /// in their models' statistics). Its trace has no compute of its own: the steps' traces do.
    async fn run_ensemble(
        &self,
        ensemble: &Ensemble,
        request: InferenceRequest,
        requested: &[String],
        batch_size: u64,
    ) -> Outcome<Vec<Tensor>> {
        let started = Instant::now();
        let wanted = self.signature.output_names(requested);
        let result = ensemble.run(request, &wanted).await;
        let output_started = Instant::now();
        let result = result.and_then(|produced| self.signature.select_outputs(requested, produced));
        if result.is_ok() {
            let timing = Timing {
                compute_input: Duration::ZERO,
                compute_infer: output_started - started,
                compute_output: output_started.elapsed(),
            };
            self.stats.executed(batch_size, &timing);
        }
        Outcome::unexecuted(result, Duration::ZERO)
    }

    /// How many inferences a request carries: its batch dimension when the model batches, else one.
    fn batch_size(&self, request: &InferenceRequest) -> u64 {
        match (self.signature.max_batch_size > 0, request.inputs.first()) {
            (true, Some(input)) => input.shape.first().copied().unwrap_or(1).max(1) as u64,
            _ => 1,
        }
    }
}

/// What running a request came to: its answer, its time queued and, when an instance executed it, where
/// the execution's time went.
struct Outcome<T> {
    result: Result<T>,
    queue: Duration,
    compute: Option<Timing>,
}

impl<T> Outcome<T> {
    /// An answer no instance executed (refused, answered from the cache, or an ensemble's).
    fn unexecuted(result: Result<T>, queue: Duration) -> Self {
        Outcome { result, queue, compute: None }
    }
}

/// Records in a request's trace the compute timestamps of its execution, when an instance executed it
/// (`compute`, which started at `started` and ended by `computed`).
fn record_compute(trace: &trace::Trace, compute: Option<&Timing>, started: Instant, computed: Instant) {
    if let Some(timing) = compute {
        let input_end = started + timing.compute_input;
        trace.timestamp("COMPUTE_START", started);
        trace.timestamp("COMPUTE_INPUT_END", input_end.min(computed));
        trace.timestamp("COMPUTE_OUTPUT_START", (input_end + timing.compute_infer).min(computed));
        trace.timestamp("COMPUTE_END", computed);
    }
}
