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
//! The bookkeeping (`state`) sits behind one lock, taken briefly to queue a request and to take back a
//! finished batch; each batch runs in the task of its first request (`batch`), so a request whose sequence
//! and instance are idle runs at once in its own task, as on the direct path. A timer task releases idle
//! sequences and starts `oldest` batches whose queue delay has passed. Unlike Triton's direct strategy, a
//! batch carries no placeholder rows for idle slots: states are kept by the server per sequence, not by
//! row position.

mod batch;
mod inputs;
mod state;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify};

use super::batcher::Answer;
use super::InstancePool;
use crate::error::{Error, Result};
use crate::inference::{InferenceRequest, SequenceFlags};
use crate::model_config::sequence::SequenceSettings;
use crate::observability::stats::Stats;
use batch::{Batch, Finished, Pending, Reply};
use inputs::Inputs;
use state::State;

/// The handle the scheduler submits requests through. Dropping it (the model version going) refuses the
/// requests still queued and stops the timer.
pub struct Sequencer {
    shared: Arc<Shared>,
    inputs: Arc<Inputs>,
    model: String,
}

/// What the sequencer's callers, its batches and its timer share.
pub struct Shared {
    state: Mutex<State>,
    /// Wakes the timer task when it must look sooner than it planned, or stop.
    timer: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("no panic while the sequencer's lock is held")
    }

    /// Takes back a finished batch, then starts the batches that can run now.
    fn finish(self: &Arc<Self>, finished: Finished) {
        let now = Instant::now();
        let (batches, wake) = {
            let mut state = self.lock();
            state.finish(finished);
            let batches = state.dispatch(self);
            // A sequence may have fallen idle: the timer must look by its idle deadline.
            let due = state.batch_due.map_or(state.idle_deadline(now), |d| d.min(state.idle_deadline(now)));
            (batches, state.timer_needed_by(due))
        };
        self.start(batches, wake);
    }

    /// Hands each batch to its leader, and wakes the timer if asked.
    fn start(&self, batches: Vec<Batch>, wake_timer: bool) {
        if wake_timer {
            self.timer.notify_one();
        }
        for batch in batches {
            batch.start();
        }
    }
}

/// The timer task: releases idle sequences and starts `oldest` batches whose delay has passed, then sleeps
/// until the next such moment or until told to look sooner; ends when the sequencer closes.
async fn timer(shared: Arc<Shared>) {
    loop {
        let (batches, next) = {
            let mut state = shared.lock();
            if state.closed {
                return;
            }
            state.release_idle(Instant::now());
            let batches = state.dispatch(&shared);
            let next = [state.batch_due, state.next_idle_deadline()].into_iter().flatten().min();
            state.timer_at = next;
            (batches, next)
        };
        shared.start(batches, false);
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            _ = shared.timer.notified() => {}
        }
    }
}

impl Sequencer {
    /// The sequencer of one model version over one pool per instance; its timer runs on `runtime`.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        model: &str,
        settings: SequenceSettings,
        lanes: Vec<Arc<InstancePool>>,
        stats: Arc<Stats>,
    ) -> Self {
        let batching = settings.max_batch_size > 0;
        let inputs = Arc::new(Inputs::new(settings.controls.clone(), settings.states.clone(), batching));
        let state = State::new(model, settings, inputs.clone(), lanes, stats);
        let shared = Arc::new(Shared { state: Mutex::new(state), timer: Notify::new() });
        runtime.spawn(timer(shared.clone()));
        Sequencer { shared, inputs, model: model.to_string() }
    }

    /// Checks the request's sequence parameters and queues it on its sequence; `rows` is its batch size.
    /// The request joins its sequence before the first await, so requests submitted in order (one
    /// stream's) run in that order.
    pub async fn submit(&self, request: InferenceRequest, rows: u64) -> Answer {
        let arrived = Instant::now();
        let refused = |e: Error| Answer { result: Err(e), queue: Duration::ZERO, compute: None };
        let flags = match self.admissible(&request, rows) {
            Ok(flags) => flags,
            Err(e) => return refused(e),
        };
        let (reply, answer) = oneshot::channel();
        let gone = || Answer { result: Err(unloading(&self.model)), queue: arrived.elapsed(), compute: None };
        let (batches, wake) = {
            let mut state = self.shared.lock();
            if state.closed {
                return gone();
            }
            state.admit(Pending { request, flags, arrived, reply });
            let batches = state.dispatch(&self.shared);
            let wake = state.batch_due.is_some_and(|due| state.timer_needed_by(due));
            (batches, wake)
        };
        // When this request's own batch is among them, its answer is a `Lead` already: no waiting below.
        self.shared.start(batches, wake);
        match answer.await {
            Ok(Reply::Done(answer)) => answer,
            Ok(Reply::Lead(batch)) => batch.lead().await,
            Err(_) => gone(),
        }
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

/// Why a request of a model version that is going is refused.
fn unloading(model: &str) -> Error {
    Error::Unavailable(format!("model '{model}' is being unloaded"))
}

impl Drop for Sequencer {
    fn drop(&mut self) {
        self.shared.lock().close();
        self.shared.timer.notify_one();
    }
}
