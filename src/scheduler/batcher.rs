//! Triton's dynamic batcher. Requests of a model with `dynamic_batching` wait in one queue; whenever an
//! instance is free, the batcher takes the oldest request and the compatible ones behind it (same data
//! types and same shapes apart from the batch dimension), until the batch reaches `max_batch_size` or a
//! `preferred_batch_size`, or the oldest request has waited `max_queue_delay_microseconds`. The batch runs
//! as one request whose inputs are the requests' inputs concatenated along the batch dimension (for a Wasm
//! plugin: one `execute` call with one batched request, as Triton does for the python backend); each
//! request gets back its own rows of every output.
//!
//! Waiting requests are ordered by `queue::PriorityQueue` (priority levels, queue sizes, timeouts). With
//! `preserve_ordering`, requests are answered in the order they joined batches even when a later batch
//! finishes first on another instance.
//!
//! Triton's test hook `TRITONSERVER_DELAY_SCHEDULER=N` holds the first batch until N requests are queued,
//! so that tests can form batches deterministically.
//!
//! The queue and its batches belong to one task (`Loop`), which each request reaches over a channel, and
//! each batch runs on a task of its own: at low load that is two hand-overs between tasks a request, each a
//! wake-up, often of the other runtime thread. So a request that would form a batch alone at once — nothing
//! queued before it, an instance idle, and no reason to wait for company (no queue delay, or its rows
//! already make the batch) — runs in its own task, as the loop would have run it (`submit`'s fast path).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, oneshot};

use super::queue::{Priorities, PriorityQueue};
use super::{InstancePool, Reservation};
use crate::error::{Error, Result};
use crate::executor::{InFlight, Waiting};
use crate::inference::{InferenceRequest, SchedulingWishes};
use crate::model_config::ModelConfig;
use crate::observability::stats::{Stats, Timing};
use crate::proto::inference::model_config::SchedulingChoice;
use crate::tensor::{bytes_elements, encode_bytes_elements, DataType, Tensor};

/// The batching settings of one model version.
#[derive(Clone, Debug)]
pub struct Policy {
    pub max_batch_size: u64,
    pub preferred: Vec<u64>,
    pub max_delay: Duration,
    pub priorities: Priorities,
    /// Answer requests in the order their batches were formed, whichever instance finishes first.
    pub preserve_ordering: bool,
}

impl Policy {
    /// The policy a validated config asks for, when it enables dynamic batching and the model batches.
    pub fn from_config(config: &ModelConfig) -> Option<Self> {
        let Some(SchedulingChoice::DynamicBatching(batching)) = &config.scheduling_choice else {
            return None;
        };
        (config.max_batch_size > 0).then(|| Policy {
            max_batch_size: config.max_batch_size as u64,
            preferred: batching.preferred_batch_size.iter().map(|&p| p.max(1) as u64).collect(),
            max_delay: Duration::from_micros(batching.max_queue_delay_microseconds),
            priorities: Priorities::from_config(batching),
            preserve_ordering: batching.preserve_ordering,
        })
    }
}

/// What a request gets back from the batcher: its outputs, and how long it waited for its batch.
pub struct Answer {
    pub result: Result<Vec<Tensor>>,
    pub queue: Duration,
    /// Where the batch's execution time went, when an instance executed it.
    pub compute: Option<Timing>,
}

struct Pending {
    request: InferenceRequest,
    rows: u64,
    arrived: Instant,
    wishes: SchedulingWishes,
    reply: oneshot::Sender<Answer>,
    /// With `preserve_ordering`, set when the request joins a batch.
    turn: Option<Turn>,
}

/// A request's place in the answering order: it answers once the request batched before it has answered
/// (or has gone), and its own going lets the next one answer.
struct Turn {
    previous: Option<oneshot::Receiver<()>>,
    _done: oneshot::Sender<()>,
}

impl Pending {
    /// Answers the request, after its predecessor when the order is preserved.
    async fn answer(self, result: Result<Vec<Tensor>>, queue: Duration, compute: Option<Timing>) {
        let mut turn = self.turn;
        if let Some(previous) = turn.as_mut().and_then(|t| t.previous.as_mut()) {
            // Both outcomes mean the predecessor has answered: its signal is only ever dropped, never sent.
            let _ = previous.await;
        }
        let _ = self.reply.send(Answer { result, queue, compute });
        drop(turn);
    }

    fn reject(self, error: Error) {
        let queue = self.arrived.elapsed();
        let _ = self.reply.send(Answer { result: Err(error), queue, compute: None });
    }
}

pub struct Batcher {
    queue: mpsc::UnboundedSender<Pending>,
    /// Requests sent to the loop and not yet in a batch or refused.
    queued: Arc<AtomicUsize>,
    /// Whether a request may skip the loop when it would be batched alone at once (`alone_now`).
    fast_path: bool,
    policy: Policy,
    pool: Arc<InstancePool>,
    stats: Arc<Stats>,
}

impl Batcher {
    /// Starts the batching task on `runtime`.
    pub fn start(runtime: &tokio::runtime::Handle, policy: Policy, pool: Arc<InstancePool>, stats: Arc<Stats>) -> Self {
        let (queue, incoming) = mpsc::unbounded_channel();
        let hold_until = std::env::var("TRITONSERVER_DELAY_SCHEDULER").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        let waiting = PriorityQueue::new(&policy.priorities);
        let queued = Arc::new(AtomicUsize::new(0));
        // The test hook and answering in batch order need every request to pass through the loop.
        let fast_path = hold_until == 0 && !policy.preserve_ordering;
        let looping = Loop {
            policy: policy.clone(),
            pool: pool.clone(),
            stats: stats.clone(),
            incoming,
            waiting,
            queued: queued.clone(),
            hold_until,
            last_turn: None,
        };
        runtime.spawn(looping.run());
        Batcher { queue, queued, fast_path, policy, pool, stats }
    }

    /// Queues a checked request; `rows` is its batch dimension.
    pub async fn submit(&self, request: InferenceRequest, rows: u64, wishes: SchedulingWishes) -> Answer {
        let arrived = Instant::now();
        let (reply, answer) = oneshot::channel();
        let gone = || Answer {
            result: Err(Error::Unavailable("the model is being unloaded".into())),
            queue: arrived.elapsed(),
            compute: None,
        };
        let pending = Pending { request, rows, arrived, wishes, reply, turn: None };
        if let Some(reservation) = self.alone_now(rows) {
            // In flight, as the loop's spawned batch would be: a client going away mid-call leaves the rest
            // to finish, so the execution is still counted. A panic drops the reply, which answers `gone`.
            let _ = InFlight::new(execute(self.pool.clone(), self.stats.clone(), reservation, vec![pending])).await;
        } else {
            self.queued.fetch_add(1, Ordering::AcqRel);
            if self.queue.send(pending).is_err() {
                return gone();
            }
        }
        answer.await.unwrap_or_else(|_| gone())
    }

    /// An idle instance for a request of `rows` when the loop would batch it alone at once: nothing waits
    /// before it, and it has no company to wait for (no queue delay, or its rows reach the batch size the
    /// loop would aim for with it alone).
    fn alone_now(&self, rows: u64) -> Option<Reservation> {
        let no_wait = self.policy.max_delay.is_zero() || rows >= aim(&self.policy, rows, rows);
        if !self.fast_path || !no_wait || self.queued.load(Ordering::Acquire) > 0 {
            return None;
        }
        self.pool.try_reserve()
    }
}

/// What woke the batching task while it waited.
// An event lives for one turn of the loop, on its stack: boxing the request would allocate once per request.
#[allow(clippy::large_enum_variant)]
enum Event {
    Arrived(Pending),
    /// A timer ran out: a request's queue deadline, or the batch delay.
    Timer,
    /// Every sender is gone: the model version was dropped.
    Closed,
}

struct Loop {
    policy: Policy,
    pool: Arc<InstancePool>,
    stats: Arc<Stats>,
    incoming: mpsc::UnboundedReceiver<Pending>,
    /// Requests received but not yet batched.
    waiting: PriorityQueue<Pending>,
    /// The batcher's count of requests sent here and not yet batched or refused.
    queued: Arc<AtomicUsize>,
    /// Form no batch before this many requests are queued (the test hook); 0 once released.
    hold_until: usize,
    /// With `preserve_ordering`: the signal of the last request put in a batch.
    last_turn: Option<oneshot::Receiver<()>>,
}

impl Loop {
    async fn run(mut self) {
        while self.wait_for_work().await {
            let Some(reservation) = self.reserve().await else {
                self.fail_all(Error::Unavailable("the model is being unloaded".into()));
                return;
            };
            if self.waiting.is_empty() {
                // Everything waiting timed out meanwhile: give the instance back.
                continue;
            }
            let batch = self.gather().await;
            self.queued.fetch_sub(batch.len(), Ordering::AcqRel);
            let (pool, stats) = (self.pool.clone(), self.stats.clone());
            tokio::spawn(execute(pool, stats, reservation, batch));
        }
        self.fail_all(Error::Unavailable("the model is being unloaded".into()));
    }

    /// Waits until a request is waiting (and the test hook lets batches form). False once closed.
    async fn wait_for_work(&mut self) -> bool {
        loop {
            self.reject_expired();
            if !self.waiting.is_empty() && self.waiting.len() >= self.hold_until {
                self.hold_until = 0;
                return true;
            }
            match self.next_event(None).await {
                Event::Arrived(pending) => self.admit(pending),
                Event::Timer => {}
                Event::Closed => return false,
            }
        }
    }

    /// Waits for an idle instance, still admitting arrivals and applying deadlines meanwhile. `None` when
    /// the pool has closed.
    async fn reserve(&mut self) -> Option<Reservation> {
        let pool = self.pool.clone();
        let reserve = pool.reserve();
        tokio::pin!(reserve);
        let mut closed = false;
        loop {
            let event = tokio::select! {
                reserved = &mut reserve => return reserved.ok(),
                event = self.next_event(None), if !closed => event,
            };
            match event {
                Event::Arrived(pending) => self.admit(pending),
                Event::Timer => self.reject_expired(),
                Event::Closed => closed = true,
            }
        }
    }

    /// The next arrival, or the next request deadline (or `until`, if sooner) passing.
    async fn next_event(&mut self, until: Option<Instant>) -> Event {
        let deadline = match (self.waiting.next_deadline(), until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timer = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            arrived = self.incoming.recv() => arrived.map_or(Event::Closed, Event::Arrived),
            _ = timer => Event::Timer,
        }
    }

    /// Queues an arrival at its priority level, or refuses it at once when that level is full.
    fn admit(&mut self, pending: Pending) {
        let level = self.policy.priorities.level_of(pending.wishes.priority);
        let (timeout, arrived) = (pending.wishes.timeout, pending.arrived);
        if let Err(refused) = self.waiting.push(level, pending, timeout, arrived) {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            let max = self.policy.priorities.levels[level].max_queue_size;
            refused.reject(Error::Unavailable(format!(
                "model '{}': Exceeds maximum queue size: {max} requests already wait at priority level {}",
                self.pool.label(),
                level + 1
            )));
        }
    }

    fn reject_expired(&mut self) {
        for pending in self.waiting.expire(Instant::now()) {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            pending.reject(Error::Unavailable(format!(
                "model '{}': Request timeout expired: the request waited in the queue past its timeout",
                self.pool.label()
            )));
        }
    }

    /// Takes the first request in serving order and compatible ones behind it: the largest preferred batch
    /// size the waiting requests can make, else as many as fit in `max_batch_size`, waiting for more until
    /// the first request's delay has passed.
    async fn gather(&mut self) -> Vec<Pending> {
        let head = self.waiting.remove(0).expect("gather is called with a waiting request");
        let deadline = head.arrived + self.policy.max_delay;
        let mut rows = head.rows;
        let mut batch = vec![head];
        loop {
            while let Ok(pending) = self.incoming.try_recv() {
                self.admit(pending);
            }
            self.reject_expired();
            let target = self.target(rows, &batch[0].request);
            let chosen: Vec<usize> = self
                .waiting
                .iter()
                .enumerate()
                .filter(|(_, p)| compatible(&batch[0].request, &p.request))
                .filter_map(|(position, p)| {
                    if rows + p.rows > target {
                        return None;
                    }
                    rows += p.rows;
                    Some(position)
                })
                .collect();
            let taken: Vec<Pending> =
                chosen.iter().rev().filter_map(|&position| self.waiting.remove(position)).collect();
            batch.extend(taken.into_iter().rev());
            if rows >= target || Instant::now() >= deadline {
                break;
            }
            // The batch is due at a timer: a runtime thread spinning then would run it late.
            let _waiting = Waiting::start();
            match self.next_event(Some(deadline)).await {
                Event::Arrived(pending) => self.admit(pending),
                Event::Timer => {}
                Event::Closed => break,
            }
        }
        if self.policy.preserve_ordering {
            for pending in &mut batch {
                let (done, signal) = oneshot::channel();
                pending.turn = Some(Turn { previous: self.last_turn.replace(signal), _done: done });
            }
        }
        batch
    }

    /// The batch size to aim for: the largest preferred size that `rows` plus the compatible waiting
    /// requests can reach, else `max_batch_size`.
    fn target(&self, rows: u64, head: &InferenceRequest) -> u64 {
        let available =
            rows + self.waiting.iter().filter(|p| compatible(head, &p.request)).map(|p| p.rows).sum::<u64>();
        aim(&self.policy, rows, available)
    }

    fn fail_all(&mut self, error: Error) {
        for pending in self.waiting.drain() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            pending.reject(error.clone());
        }
    }
}

/// The batch size to aim for with `rows` in the batch and `available` rows batchable: the largest
/// preferred size in between, else `max_batch_size`.
fn aim(policy: &Policy, rows: u64, available: u64) -> u64 {
    let max = policy.max_batch_size;
    policy.preferred.iter().copied().filter(|&p| p <= available.min(max) && p >= rows).max().unwrap_or(max)
}

/// Same inputs in the same order, each with the same data type and the same shape past the batch dimension.
pub(super) fn compatible(a: &InferenceRequest, b: &InferenceRequest) -> bool {
    a.inputs.len() == b.inputs.len()
        && a.inputs
            .iter()
            .zip(&b.inputs)
            .all(|(x, y)| x.name == y.name && x.datatype == y.datatype && x.shape[1..] == y.shape[1..])
}

/// Runs one batch and answers each of its requests.
async fn execute(pool: Arc<InstancePool>, stats: Arc<Stats>, reservation: Reservation, batch: Vec<Pending>) {
    let dispatched = Instant::now();
    let rows: Vec<u64> = batch.iter().map(|p| p.rows).collect();
    let total: u64 = rows.iter().sum();
    let merged = merge(batch.iter().map(|p| &p.request).collect());
    let execution = pool.run(reservation, merged).await;
    let split_started = Instant::now();
    let results: Vec<Result<Vec<Tensor>>> = match execution.result {
        Ok(outputs) => split(outputs, &rows),
        Err(e) => rows.iter().map(|_| Err(e.clone())).collect(),
    };
    let compute = execution.timing.map(|timing| Timing { compute_output: split_started.elapsed(), ..timing });
    if let Some(timing) = &compute {
        stats.executed(total, timing);
    }
    for (pending, result) in batch.into_iter().zip(results) {
        let queue = dispatched.duration_since(pending.arrived);
        pending.answer(result, queue, compute).await;
    }
}

/// One request carrying every request's inputs, concatenated along the batch dimension. The requested
/// outputs are all of them (each request then keeps its own); the first request's id and parameters stand
/// for the batch. A batch of several carries no trace: what the model does for it is no one request's.
pub(super) fn merge(requests: Vec<&InferenceRequest>) -> InferenceRequest {
    let first = requests[0];
    if requests.len() == 1 {
        return InferenceRequest { requested_outputs: Vec::new(), ..first.clone() };
    }
    let inputs = first
        .inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let mut data = BytesMut::with_capacity(requests.iter().map(|r| r.inputs[i].data.len()).sum());
            let mut shape = input.shape.clone();
            shape[0] = requests.iter().map(|r| r.inputs[i].shape[0]).sum();
            for request in &requests {
                data.extend_from_slice(&request.inputs[i].data);
            }
            Tensor { name: input.name.clone(), datatype: input.datatype, shape, data: data.freeze() }
        })
        .collect();
    InferenceRequest { inputs, requested_outputs: Vec::new(), trace: None, ..first.clone() }
}

/// Splits each output along the batch dimension, `rows[i]` rows for request i.
pub(super) fn split(outputs: Vec<Tensor>, rows: &[u64]) -> Vec<Result<Vec<Tensor>>> {
    let total: u64 = rows.iter().sum();
    let mut per_request: Vec<Vec<Tensor>> = rows.iter().map(|_| Vec::with_capacity(outputs.len())).collect();
    for output in outputs {
        if output.shape.first().copied() != Some(total as i64) {
            let e = Error::internal(format!(
                "output '{}' has shape {:?}, but the batch had {total} rows: it cannot be split",
                output.name, output.shape
            ));
            return rows.iter().map(|_| Err(e.clone())).collect();
        }
        match split_rows(&output, rows) {
            Ok(parts) => per_request.iter_mut().zip(parts).for_each(|(outputs, part)| outputs.push(part)),
            Err(e) => return rows.iter().map(|_| Err(e.clone())).collect(),
        }
    }
    per_request.into_iter().map(Ok).collect()
}

fn split_rows(output: &Tensor, rows: &[u64]) -> Result<Vec<Tensor>> {
    let total: u64 = rows.iter().sum();
    let part = |data: Bytes, n: u64| {
        let mut shape = output.shape.clone();
        shape[0] = n as i64;
        Tensor { name: output.name.clone(), datatype: output.datatype, shape, data }
    };
    if output.datatype == DataType::Bytes {
        let elements = bytes_elements(&output.data).map_err(Error::internal)?;
        let per_row = elements.len() / total as usize;
        let mut start = 0;
        return Ok(rows
            .iter()
            .map(|&n| {
                let end = start + per_row * n as usize;
                let data = encode_bytes_elements(elements[start..end].iter().copied());
                start = end;
                part(data, n)
            })
            .collect());
    }
    let row_bytes = output.data.len() / total as usize;
    let mut start = 0;
    Ok(rows
        .iter()
        .map(|&n| {
            let end = start + row_bytes * n as usize;
            let data = output.data.slice(start..end);
            start = end;
            part(data, n)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int32(name: &str, rows: i64, values: &[i32]) -> Tensor {
        Tensor {
            name: name.into(),
            datatype: DataType::Int32,
            shape: vec![rows, values.len() as i64 / rows],
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>().into(),
        }
    }

    fn request(values: &[i32], rows: i64) -> InferenceRequest {
        InferenceRequest {
            model: "m".into(),
            inputs: vec![int32("X", rows, values)],
            requested_outputs: vec!["Y".into()],
            ..InferenceRequest::default()
        }
    }

    #[test]
    fn merge_concatenates_and_split_gives_each_its_rows() {
        let (a, b) = (request(&[1, 2], 1), request(&[3, 4, 5, 6], 2));
        let merged = merge(vec![&a, &b]);
        assert_eq!(merged.inputs[0].shape, vec![3, 2]);
        assert!(merged.requested_outputs.is_empty());
        let parts = split(vec![Tensor { name: "Y".into(), ..merged.inputs[0].clone() }], &[1, 2]);
        assert_eq!(parts[0].as_ref().unwrap()[0], Tensor { name: "Y".into(), ..a.inputs[0].clone() });
        assert_eq!(parts[1].as_ref().unwrap()[0], Tensor { name: "Y".into(), ..b.inputs[0].clone() });
    }

    #[test]
    fn bytes_outputs_split_by_element() {
        let data = encode_bytes_elements([&b"a"[..], b"", b"ccc"]);
        let output = Tensor { name: "S".into(), datatype: DataType::Bytes, shape: vec![3, 1], data };
        let parts = split_rows(&output, &[2, 1]).unwrap();
        assert_eq!(bytes_elements(&parts[0].data).unwrap(), vec![&b"a"[..], b""]);
        assert_eq!(bytes_elements(&parts[1].data).unwrap(), vec![&b"ccc"[..]]);
    }

    #[test]
    fn only_same_shaped_requests_batch_together() {
        assert!(compatible(&request(&[1, 2], 1), &request(&[3, 4, 5, 6], 2)));
        assert!(!compatible(&request(&[1, 2], 1), &request(&[3, 4, 5], 1)));
    }
}
