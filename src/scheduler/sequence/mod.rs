//! Triton's sequence batcher: every request of a sequence (one correlation id) runs on the same instance, in
//! the order it arrived, one at a time, with the control inputs and implicit states filled in (`inputs`).
//!
//! A sequence takes a slot of one instance at its START and keeps it until its END has run, or until it
//! has been idle for `max_sequence_idle_microseconds` (then a later request of it is refused as never
//! started, as in Triton). A START finding no free slot waits in the backlog until one frees. Each instance
//! runs batches of its sequences' next requests, at most one per sequence: with the `direct` strategy a
//! batch is whatever its slots have ready (each instance has `max_batch_size` slots); with `oldest` up to
//! `max_candidate_sequences` sequences share the instance and batches form from their oldest requests, up
//! to a preferred size or the queue delay, as the dynamic batcher forms them.
//!
//! One task owns all of it (the `Loop`), so no lock is taken per request; batches run on tasks of their
//! own and report back. Unlike Triton's direct strategy, a batch carries no placeholder rows for idle
//! slots: states are kept by the server per sequence, not by row position.

mod inputs;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::batcher::{compatible, merge, split, Answer};
use super::InstancePool;
use crate::error::{Error, Result};
use crate::inference::{CorrelationId, InferenceRequest, SequenceFlags};
use crate::model_config::sequence::{SequenceSettings, Strategy};
use crate::observability::stats::{Stats, Timing};
use crate::tensor::Tensor;
use inputs::Inputs;

/// The handle the scheduler submits requests through.
pub struct Sequencer {
    queue: mpsc::UnboundedSender<Pending>,
    inputs: Arc<Inputs>,
    model: String,
}

struct Pending {
    request: InferenceRequest,
    flags: SequenceFlags,
    arrived: Instant,
    reply: oneshot::Sender<Answer>,
}

impl Sequencer {
    /// Starts the batcher's task on `runtime`, over one pool per instance.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        model: &str,
        settings: SequenceSettings,
        lanes: Vec<Arc<InstancePool>>,
        stats: Arc<Stats>,
    ) -> Self {
        let (queue, incoming) = mpsc::unbounded_channel();
        let (finished_tx, finished) = mpsc::unbounded_channel();
        let batching = settings.max_batch_size > 0;
        let inputs = Arc::new(Inputs::new(settings.controls.clone(), settings.states.clone(), batching));
        let capacity = match settings.strategy {
            Strategy::Direct => settings.max_batch_size.max(1) as usize,
            Strategy::Oldest { candidates, .. } => candidates,
        };
        let lanes = lanes.into_iter().map(|pool| Lane { pool, busy: false, members: Vec::new(), capacity }).collect();
        let task = Loop {
            settings,
            inputs: inputs.clone(),
            lanes,
            sequences: HashMap::new(),
            by_id: HashMap::new(),
            backlog: VecDeque::new(),
            next_key: 0,
            incoming,
            finished,
            finished_tx,
            stats,
            model: model.to_string(),
        };
        runtime.spawn(task.run());
        Sequencer { queue, inputs, model: model.to_string() }
    }

    /// Checks the request's sequence parameters and queues it on its sequence; `rows` is its batch size.
    /// The request joins the queue before the first await, so requests submitted in order (one stream's)
    /// run in that order.
    pub async fn submit(&self, request: InferenceRequest, rows: u64) -> Answer {
        let arrived = Instant::now();
        let refused = |e: Error| Answer { result: Err(e), queue: Duration::ZERO };
        let flags = match self.admissible(&request, rows) {
            Ok(flags) => flags,
            Err(e) => return refused(e),
        };
        let (reply, answer) = oneshot::channel();
        let gone = || Answer {
            result: Err(Error::Unavailable(format!("model '{}' is being unloaded", self.model))),
            queue: arrived.elapsed(),
        };
        if self.queue.send(Pending { request, flags, arrived, reply }).is_err() {
            return gone();
        }
        answer.await.unwrap_or_else(|_| gone())
    }

    /// Triton's checks, in Triton's words: one row, a correlation id, of the type the CORRID control takes.
    fn admissible(&self, request: &InferenceRequest, rows: u64) -> Result<SequenceFlags> {
        let model = &self.model;
        let flags = request.sequence_flags()?;
        if rows > 1 {
            return Err(Error::invalid(format!(
                "inference request to model '{model}' must specify batch-size 1 due to requirements of sequence \
                 batcher"
            )));
        }
        if !flags.id.in_sequence() {
            return Err(Error::invalid(format!(
                "inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
            )));
        }
        self.inputs.check_id_type(&flags.id, &request.id, model)?;
        Ok(flags)
    }
}

/// One instance, with the sequences holding its slots.
struct Lane {
    pool: Arc<InstancePool>,
    busy: bool,
    members: Vec<u64>,
    capacity: usize,
}

/// One sequence: its queue of requests and its states.
struct Sequence {
    id: CorrelationId,
    lane: Option<usize>,
    queue: VecDeque<Pending>,
    running: bool,
    /// Its END has been queued: it goes once its queue has run.
    ending: bool,
    last_active: Instant,
    states: Vec<Tensor>,
}

impl Sequence {
    fn ready(&self) -> bool {
        !self.running && !self.queue.is_empty()
    }
}

/// A batch that ran on `lane`: each sequence with the states its request produced (`None`: the request
/// failed and the states stay as they were).
struct Finished {
    lane: usize,
    sequences: Vec<(u64, Option<Vec<Tensor>>)>,
}

struct Loop {
    settings: SequenceSettings,
    inputs: Arc<Inputs>,
    lanes: Vec<Lane>,
    /// Sequences by an internal key: an id can start again while its ended sequence still runs.
    sequences: HashMap<u64, Sequence>,
    /// The running sequence of each correlation id.
    by_id: HashMap<CorrelationId, u64>,
    /// Sequences waiting for a slot, in order of their START.
    backlog: VecDeque<u64>,
    next_key: u64,
    incoming: mpsc::UnboundedReceiver<Pending>,
    finished: mpsc::UnboundedReceiver<Finished>,
    finished_tx: mpsc::UnboundedSender<Finished>,
    /// Also keeps the `tessera_sequence_active` gauge: sequences holding a slot or waiting for one.
    stats: Arc<Stats>,
    model: String,
}

impl Loop {
    async fn run(mut self) {
        loop {
            let batch_due = self.dispatch();
            let wake = [batch_due, self.next_idle_deadline()].into_iter().flatten().min();
            let timer = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                arrived = self.incoming.recv() => match arrived {
                    Some(pending) => self.admit(pending),
                    None => break,
                },
                Some(finished) = self.finished.recv() => self.finish(finished),
                _ = timer => self.release_idle(Instant::now()),
            }
        }
        let unloading = Error::Unavailable(format!("model '{}' is being unloaded", self.model));
        self.stats.sequences().sub(self.sequences.len() as i64);
        for sequence in self.sequences.values_mut() {
            for pending in sequence.queue.drain(..) {
                let _ = pending.reply.send(Answer { result: Err(unloading.clone()), queue: pending.arrived.elapsed() });
            }
        }
    }

    /// Puts an arrival on its sequence, starting one at a START (Triton's message when there is none).
    fn admit(&mut self, pending: Pending) {
        let id = pending.flags.id.clone();
        let key = match self.by_id.get(&id) {
            Some(&key) => {
                if pending.flags.start {
                    tracing::warn!(
                        "sequence {id} for model '{}' has a conflict. The previous sequence did not end before this \
                         sequence start. Previous sequence will be terminated early.",
                        self.model
                    );
                }
                key
            }
            None if !pending.flags.start => {
                let message = format!(
                    "inference request for sequence {id} to model '{}' must specify the START flag on the first \
                     request of the sequence",
                    self.model
                );
                let _ = pending.reply.send(Answer { result: Err(Error::invalid(message)), queue: Duration::ZERO });
                return;
            }
            None => self.start_sequence(id.clone()),
        };
        let sequence = self.sequences.get_mut(&key).expect("a known key");
        sequence.last_active = pending.arrived;
        if pending.flags.end {
            sequence.ending = true;
            self.by_id.remove(&id);
        }
        sequence.queue.push_back(pending);
    }

    fn start_sequence(&mut self, id: CorrelationId) -> u64 {
        let key = self.next_key;
        self.next_key += 1;
        let lane = self
            .lanes
            .iter()
            .enumerate()
            .filter(|(_, l)| l.members.len() < l.capacity)
            .min_by_key(|(_, l)| l.members.len())
            .map(|(i, _)| i);
        match lane {
            Some(lane) => self.lanes[lane].members.push(key),
            None => self.backlog.push_back(key),
        }
        let sequence = Sequence {
            id: id.clone(),
            lane,
            queue: VecDeque::new(),
            running: false,
            ending: false,
            last_active: Instant::now(),
            states: Vec::new(),
        };
        self.sequences.insert(key, sequence);
        self.by_id.insert(id, key);
        self.stats.sequences().inc();
        key
    }

    /// Starts a batch on every idle instance that has one due; returns when the next `oldest` batch that
    /// is waiting for more requests falls due.
    fn dispatch(&mut self) -> Option<Instant> {
        let mut due = None;
        for lane in 0..self.lanes.len() {
            if self.lanes[lane].busy {
                continue;
            }
            match self.choose(lane) {
                Ok(chosen) if !chosen.is_empty() => self.launch(lane, chosen),
                Ok(_) => {}
                Err(at) => due = Some(due.map_or(at, |d: Instant| d.min(at))),
            }
        }
        due
    }

    /// The sequences whose next requests make `lane`'s next batch, or when that batch falls due.
    fn choose(&self, lane: usize) -> std::result::Result<Vec<u64>, Instant> {
        let max = self.settings.max_batch_size.max(1) as usize;
        let mut ready: Vec<u64> =
            self.lanes[lane].members.iter().copied().filter(|key| self.sequences[key].ready()).collect();
        let Strategy::Oldest { preferred, max_delay, .. } = &self.settings.strategy else {
            ready.truncate(max);
            return Ok(ready);
        };
        let head_of = |key: &u64| &self.sequences[key].queue[0];
        ready.sort_by_key(|key| head_of(key).arrived);
        let Some(first) = ready.first().copied() else { return Ok(ready) };
        let first_request = &head_of(&first).request;
        ready.retain(|key| compatible(first_request, &head_of(key).request));
        ready.truncate(max);
        let target = preferred.iter().copied().max().unwrap_or(max as u64) as usize;
        let due = head_of(&first).arrived + *max_delay;
        if ready.len() >= target.min(max) || Instant::now() >= due {
            Ok(ready)
        } else {
            Err(due)
        }
    }

    /// Runs the next request of each chosen sequence as one batch on `lane`.
    fn launch(&mut self, lane: usize, chosen: Vec<u64>) {
        let mut batch = Vec::with_capacity(chosen.len());
        for key in &chosen {
            let sequence = self.sequences.get_mut(key).expect("a chosen key");
            sequence.running = true;
            let mut pending = sequence.queue.pop_front().expect("a ready sequence has a request");
            self.inputs.add_to(&mut pending.request.inputs, &pending.flags, &sequence.states);
            batch.push(pending);
        }
        self.lanes[lane].busy = true;
        let pool = self.lanes[lane].pool.clone();
        let (inputs, stats, report) = (self.inputs.clone(), self.stats.clone(), self.finished_tx.clone());
        tokio::spawn(async move {
            let states = execute(&pool, &inputs, &stats, batch).await;
            let _ = report.send(Finished { lane, sequences: chosen.into_iter().zip(states).collect() });
        });
    }

    /// Takes back a finished batch: new states, and the slots of sequences that ended.
    fn finish(&mut self, finished: Finished) {
        self.lanes[finished.lane].busy = false;
        let now = Instant::now();
        for (key, states) in finished.sequences {
            let sequence = self.sequences.get_mut(&key).expect("a running sequence is known");
            sequence.running = false;
            sequence.last_active = now;
            if let Some(states) = states {
                sequence.states = states;
            }
            if sequence.ending && sequence.queue.is_empty() {
                self.release(key);
            }
        }
    }

    /// The soonest moment an idle sequence's slot is due back.
    fn next_idle_deadline(&self) -> Option<Instant> {
        self.sequences
            .values()
            .filter(|s| s.lane.is_some() && !s.running && s.queue.is_empty())
            .map(|s| s.last_active + self.settings.idle)
            .min()
    }

    /// Releases every sequence idle for `max_sequence_idle_microseconds` at `now`.
    fn release_idle(&mut self, now: Instant) {
        let idle: Vec<u64> = self
            .sequences
            .iter()
            .filter(|(_, s)| s.lane.is_some() && !s.running && s.queue.is_empty())
            .filter(|(_, s)| now >= s.last_active + self.settings.idle)
            .map(|(&key, _)| key)
            .collect();
        for key in idle {
            tracing::debug!(model = %self.model, sequence = %self.sequences[&key].id, "idle sequence released");
            self.release(key);
        }
    }

    /// Forgets a sequence and hands its slot to the first sequence in the backlog.
    fn release(&mut self, key: u64) {
        let sequence = self.sequences.remove(&key).expect("a known key");
        self.stats.sequences().dec();
        if self.by_id.get(&sequence.id) == Some(&key) {
            self.by_id.remove(&sequence.id);
        }
        let Some(lane) = sequence.lane else { return };
        self.lanes[lane].members.retain(|&k| k != key);
        if let Some(next) = self.backlog.pop_front() {
            self.lanes[lane].members.push(next);
            self.sequences.get_mut(&next).expect("a backlogged key").lane = Some(lane);
        }
    }
}

/// Runs one batch and answers its requests; returns each request's new states (`None` where it failed).
async fn execute(pool: &InstancePool, inputs: &Inputs, stats: &Stats, batch: Vec<Pending>) -> Vec<Option<Vec<Tensor>>> {
    let dispatched = Instant::now();
    let rows: Vec<u64> = batch.iter().map(|_| 1).collect();
    let merged = merge(batch.iter().map(|p| &p.request).collect());
    let execution = pool.execute(merged).await;
    let split_started = Instant::now();
    let results: Vec<Result<Vec<Tensor>>> = match execution.result {
        // A batch of one is the request itself (and a model that does not batch has no rows to split).
        Ok(outputs) if rows.len() == 1 => vec![Ok(outputs)],
        Ok(outputs) => split(outputs, &rows),
        Err(e) => rows.iter().map(|_| Err(e.clone())).collect(),
    };
    if let Some(timing) = execution.timing {
        stats.executed(rows.len() as u64, &Timing { compute_output: split_started.elapsed(), ..timing });
    }
    batch
        .into_iter()
        .zip(results)
        .map(|(pending, result)| {
            let mut states = None;
            let result = result.and_then(|mut outputs| {
                states = Some(inputs.take_states(&mut outputs)?);
                Ok(outputs)
            });
            let _ = pending.reply.send(Answer { result, queue: dispatched.duration_since(pending.arrived) });
            states
        })
        .collect()
}
