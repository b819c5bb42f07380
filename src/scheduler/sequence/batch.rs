//! One batch of the sequence batcher, and who runs it: the task of the request at its head (its leader),
//! which was waiting for its answer anyway. A task of its own would cost a hand-off to another runtime
//! thread and back, more than a small model's whole call; a request that finds its sequence and instance
//! idle leads its own batch of one without waiting at all. The leader answers the batch's other requests
//! and reports the sequences' new states to the batcher. A leader that went away before its turn (its client disconnected) cannot lead: the batch
//! then runs on a task of its own. A leader that goes away mid-batch leaves the rest to finish on a task
//! (`InFlight`), so the batch always reports back and its instance is never left busy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::super::batcher::{merge, split, Answer};
use super::super::InstancePool;
use super::inputs::Inputs;
use super::Shared;
use crate::error::{Error, Result};
use crate::executor::InFlight;
use crate::inference::{InferenceRequest, SequenceFlags};
use crate::observability::stats::{Stats, Timing};
use crate::tensor::Tensor;

/// A request waiting in its sequence.
pub struct Pending {
    pub request: InferenceRequest,
    pub flags: SequenceFlags,
    pub arrived: Instant,
    pub reply: oneshot::Sender<Reply>,
}

impl Pending {
    /// Answers the request with `result` (no batch ran it).
    pub fn refuse(self, error: Error) {
        let queue = self.arrived.elapsed();
        let _ = self.reply.send(Reply::Done(Answer { result: Err(error), queue, compute: None }));
    }
}

/// What a waiting request gets: its answer, or a batch to lead (its own request at the head).
pub enum Reply {
    Done(Answer),
    Lead(Batch),
}

/// A batch that ran on `lane`: each sequence with the states its request produced (`None`: the request
/// failed and the states stay as they were).
pub struct Finished {
    pub lane: usize,
    pub sequences: Vec<(u64, Option<Vec<Tensor>>)>,
}

/// The next request of each of some sequences, to run as one execution on one instance.
pub struct Batch {
    pub lane: usize,
    pub pool: Arc<InstancePool>,
    pub inputs: Arc<Inputs>,
    pub stats: Arc<Stats>,
    /// Where the batch reports back.
    pub shared: Arc<Shared>,
    /// The sequences' keys and requests, the leader's first.
    pub members: Vec<(u64, Pending)>,
}

impl Batch {
    /// Hands the batch to its leader, or, if the leader has gone, runs it on a task of its own.
    pub fn start(mut self) {
        // The leader's answer is the value `lead` returns: its place in the batch keeps a reply nobody reads.
        let (unread, _) = oneshot::channel();
        let reply = std::mem::replace(&mut self.members[0].1.reply, unread);
        if let Err(Reply::Lead(batch)) = reply.send(Reply::Lead(self)) {
            tokio::spawn(batch.run());
        }
    }

    /// Runs the batch in the calling task (the rest moving onto a task if the caller goes away) and returns
    /// the leader's own answer.
    pub async fn lead(self) -> Answer {
        let arrived = self.members[0].1.arrived;
        match InFlight::new(self.run()).await {
            Ok(answer) => answer,
            Err(panic) => Answer { result: Err(Error::internal(panic)), queue: arrived.elapsed(), compute: None },
        }
    }

    /// Executes, answers every member but the first, reports to the batcher, and returns the first
    /// member's answer.
    async fn run(self) -> Answer {
        let Batch { lane, pool, inputs, stats, shared, members } = self;
        let dispatched = Instant::now();
        let rows: Vec<u64> = members.iter().map(|_| 1).collect();
        let merged = merge(members.iter().map(|(_, p)| &p.request).collect());
        let execution = pool.execute(merged).await;
        let split_started = Instant::now();
        let results: Vec<Result<Vec<Tensor>>> = match execution.result {
            // A batch of one is the request itself (and a model that does not batch has no rows to split).
            Ok(outputs) if rows.len() == 1 => vec![Ok(outputs)],
            Ok(outputs) => split(outputs, &rows),
            Err(e) => rows.iter().map(|_| Err(e.clone())).collect(),
        };
        let compute = execution.timing.map(|timing| Timing { compute_output: split_started.elapsed(), ..timing });
        if let Some(timing) = &compute {
            stats.executed(rows.len() as u64, timing);
        }
        let mut first = None;
        let mut sequences = Vec::with_capacity(members.len());
        for ((key, pending), result) in members.into_iter().zip(results) {
            let mut states = None;
            let result = result.and_then(|mut outputs| {
                states = Some(inputs.take_states(&mut outputs)?);
                Ok(outputs)
            });
            let answer = Answer { result, queue: dispatched.duration_since(pending.arrived), compute };
            match first {
                None => first = Some(answer),
                Some(_) => {
                    let _ = pending.reply.send(Reply::Done(answer));
                }
            }
            sequences.push((key, states));
        }
        shared.finish(Finished { lane, sequences });
        first.unwrap_or(Answer { result: Err(Error::internal("an empty batch")), queue: Duration::ZERO, compute: None })
    }
}
