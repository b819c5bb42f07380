//! What the sequence batcher knows, behind its lock: every sequence with its queue, slot and states, the
//! instances (lanes) with the sequences holding their slots, and the backlog. Its methods do the
//! bookkeeping and form batches; they never wait, and the batches they form start after the lock is let go.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::super::batcher::compatible;
use super::super::InstancePool;
use super::batch::{Batch, Finished, Pending};
use super::inputs::Inputs;
use super::Shared;
use crate::error::Error;
use crate::inference::CorrelationId;
use crate::model_config::sequence::{SequenceSettings, Strategy};
use crate::observability::stats::Stats;
use crate::tensor::Tensor;

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

pub struct State {
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
    /// Also keeps the `tessera_sequence_active` gauge: sequences holding a slot or waiting for one.
    stats: Arc<Stats>,
    model: String,
    /// When the earliest `oldest` batch waiting for more requests falls due.
    pub batch_due: Option<Instant>,
    /// When the timer task will look next (`None`: when it is told to).
    pub timer_at: Option<Instant>,
    /// Set when the model version goes: later requests are refused.
    pub closed: bool,
}

impl State {
    pub fn new(
        model: &str,
        settings: SequenceSettings,
        inputs: Arc<Inputs>,
        lanes: Vec<Arc<InstancePool>>,
        stats: Arc<Stats>,
    ) -> Self {
        let capacity = match settings.strategy {
            Strategy::Direct { .. } => settings.max_batch_size.max(1) as usize,
            Strategy::Oldest { candidates, .. } => candidates,
        };
        let lanes = lanes.into_iter().map(|pool| Lane { pool, busy: false, members: Vec::new(), capacity }).collect();
        State {
            settings,
            inputs,
            lanes,
            sequences: HashMap::new(),
            by_id: HashMap::new(),
            backlog: VecDeque::new(),
            next_key: 0,
            stats,
            model: model.to_string(),
            batch_due: None,
            timer_at: None,
            closed: false,
        }
    }

    /// The sequences' idle deadline for one that falls idle now.
    pub fn idle_deadline(&self, now: Instant) -> Instant {
        now + self.settings.idle
    }

    /// Whether the timer must look sooner than it means to, at `at`; if so, it is now meant to.
    pub fn timer_needed_by(&mut self, at: Instant) -> bool {
        let sooner = self.timer_at.is_none_or(|planned| at < planned);
        if sooner {
            self.timer_at = Some(at);
        }
        sooner
    }

    /// Refuses every queued request (the model version is going) and forgets the sequences.
    pub fn close(&mut self) {
        self.closed = true;
        let unloading = super::unloading(&self.model);
        self.stats.sequences().sub(self.sequences.len() as i64);
        for (_, mut sequence) in self.sequences.drain() {
            for pending in sequence.queue.drain(..) {
                pending.refuse(unloading.clone());
            }
        }
        self.by_id.clear();
        self.backlog.clear();
    }

    /// Puts an arrival on its sequence, starting one at a START (Triton's message when there is none).
    pub fn admit(&mut self, pending: Pending) {
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
                pending.refuse(Error::invalid(message));
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

    /// The batches due on idle instances, to be started once the lock is released (`Batch::start`); an
    /// `oldest` batch still waiting for more requests sets `batch_due`.
    pub fn dispatch(&mut self, shared: &Arc<Shared>) -> Vec<Batch> {
        let mut batches = Vec::new();
        self.batch_due = None;
        for lane in 0..self.lanes.len() {
            if self.lanes[lane].busy {
                continue;
            }
            match self.choose(lane) {
                Ok(chosen) if !chosen.is_empty() => batches.push(self.launch(lane, chosen, shared)),
                Ok(_) => {}
                Err(at) => self.batch_due = Some(self.batch_due.map_or(at, |d: Instant| d.min(at))),
            }
        }
        batches
    }

    /// The sequences whose next requests make `lane`'s next batch, or when that batch falls due.
    fn choose(&self, lane: usize) -> std::result::Result<Vec<u64>, Instant> {
        let max = if self.settings.decoupled { 1 } else { self.settings.max_batch_size.max(1) as usize };
        let mut ready: Vec<u64> =
            self.lanes[lane].members.iter().copied().filter(|key| self.sequences[key].ready()).collect();
        let head_of = |key: &u64| &self.sequences[key].queue[0];
        let (preferred, max_delay) = match &self.settings.strategy {
            Strategy::Direct { max_delay, min_utilization } => {
                let Some(&first) = ready.iter().min_by_key(|key| head_of(key).arrived) else { return Ok(ready) };
                // Only requests whose tensors stack with the oldest one's make one batch.
                let first_request = &head_of(&first).request;
                ready.retain(|key| compatible(first_request, &head_of(key).request));
                ready.truncate(max);
                let utilization = ready.len() as f32 / self.lanes[lane].capacity as f32;
                let due = head_of(&first).arrived + *max_delay;
                return match utilization >= *min_utilization || Instant::now() >= due {
                    true => Ok(ready),
                    false => Err(due),
                };
            }
            Strategy::Oldest { preferred, max_delay, .. } => (preferred, max_delay),
        };
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

    /// The next request of each chosen sequence as one batch on `lane`.
    fn launch(&mut self, lane: usize, chosen: Vec<u64>, shared: &Arc<Shared>) -> Batch {
        let mut members = Vec::with_capacity(chosen.len());
        for key in chosen {
            let sequence = self.sequences.get_mut(&key).expect("a chosen key");
            sequence.running = true;
            let mut pending = sequence.queue.pop_front().expect("a ready sequence has a request");
            self.inputs.add_to(&mut pending.request.inputs, &pending.flags, &sequence.states);
            members.push((key, pending));
        }
        self.lanes[lane].busy = true;
        Batch {
            lane,
            pool: self.lanes[lane].pool.clone(),
            inputs: self.inputs.clone(),
            stats: self.stats.clone(),
            shared: shared.clone(),
            members,
        }
    }

    /// Takes back a finished batch: new states, and the slots of sequences that ended.
    pub fn finish(&mut self, finished: Finished) {
        self.lanes[finished.lane].busy = false;
        let now = Instant::now();
        for (key, states) in finished.sequences {
            // Gone only when the sequencer closed while the batch ran.
            let Some(sequence) = self.sequences.get_mut(&key) else { continue };
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
    pub fn next_idle_deadline(&self) -> Option<Instant> {
        self.sequences
            .values()
            .filter(|s| s.lane.is_some() && !s.running && s.queue.is_empty())
            .map(|s| s.last_active + self.settings.idle)
            .min()
    }

    /// Releases every sequence idle for `max_sequence_idle_microseconds` at `now`.
    pub fn release_idle(&mut self, now: Instant) {
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
