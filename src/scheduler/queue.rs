//! The dynamic batcher's waiting room, ordered as Triton orders it: one queue per priority level (level 1
//! is the most urgent), each under its own queue policy. A policy may cap the number of waiting requests
//! (one more is refused at once) and give each request a deadline; a request still waiting at its deadline
//! is rejected or, with `timeout_action: DELAY`, moved behind the requests of its level that are still on
//! time. Requests are served level by level, on-time before delayed, oldest first. This module only orders
//! and expires; which requests form a batch is the batcher's decision.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::proto::inference::{model_queue_policy::TimeoutAction, ModelDynamicBatching, ModelQueuePolicy};

/// One priority level's rules (Triton's `ModelQueuePolicy`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueuePolicy {
    /// The most requests that may wait at this level; 0 means no limit.
    pub max_queue_size: usize,
    /// How long a request may wait; `None` means forever.
    pub default_timeout: Option<Duration>,
    /// Whether a request's own `timeout` parameter may shorten `default_timeout`.
    pub allow_timeout_override: bool,
    /// At its deadline a request moves behind the on-time ones (DELAY) instead of being rejected (REJECT).
    pub delay_on_timeout: bool,
}

impl QueuePolicy {
    fn from_config(policy: &ModelQueuePolicy) -> Self {
        QueuePolicy {
            max_queue_size: policy.max_queue_size as usize,
            default_timeout: (policy.default_timeout_microseconds > 0)
                .then(|| Duration::from_micros(policy.default_timeout_microseconds)),
            allow_timeout_override: policy.allow_timeout_override,
            delay_on_timeout: policy.timeout_action == TimeoutAction::Delay as i32,
        }
    }

    /// The deadline of a request arriving at `now` that asks for `requested`. As in Triton, a request may
    /// only shorten a default timeout, never lengthen it nor add one where the level has none.
    fn deadline(&self, now: Instant, requested: Option<Duration>) -> Option<Instant> {
        let default = self.default_timeout?;
        let timeout = match requested {
            Some(asked) if self.allow_timeout_override && !asked.is_zero() && asked < default => asked,
            _ => default,
        };
        Some(now + timeout)
    }
}

/// The priority levels of a model and their policies.
#[derive(Clone, Debug, PartialEq)]
pub struct Priorities {
    /// Index 0 is priority level 1. A config without `priority_levels` has exactly one level.
    pub levels: Vec<QueuePolicy>,
    /// The index in `levels` of the level for requests that name none.
    pub default_level: usize,
}

impl Priorities {
    /// The levels a validated `dynamic_batching` asks for: `priority_levels` of them (one when unset), each
    /// under its `priority_queue_policy` entry or else the `default_queue_policy`.
    pub fn from_config(batching: &ModelDynamicBatching) -> Self {
        let default = batching.default_queue_policy.as_ref().map(QueuePolicy::from_config).unwrap_or_default();
        let count = batching.priority_levels.max(1);
        let levels = (1..=count)
            .map(|level| {
                batching.priority_queue_policy.get(&level).map_or_else(|| default.clone(), QueuePolicy::from_config)
            })
            .collect();
        let default_level = batching.default_priority_level.clamp(1, count) as usize - 1;
        Priorities { levels, default_level }
    }

    /// The level index for a request's `priority` parameter: 0, or a level that does not exist, means the
    /// default level (as Triton).
    pub fn level_of(&self, priority: u64) -> usize {
        match usize::try_from(priority) {
            Ok(p) if p >= 1 && p <= self.levels.len() => p - 1,
            _ => self.default_level,
        }
    }
}

struct Level<T> {
    policy: QueuePolicy,
    /// Requests still on time, with their deadlines, oldest first.
    on_time: VecDeque<(T, Option<Instant>)>,
    /// Requests past their deadline under DELAY, in the order they expired.
    delayed: VecDeque<T>,
}

impl<T> Level<T> {
    fn len(&self) -> usize {
        self.on_time.len() + self.delayed.len()
    }
}

pub struct PriorityQueue<T> {
    levels: Vec<Level<T>>,
    /// Whether any level gives deadlines; without them `expire` and `next_deadline` have nothing to do.
    deadlines: bool,
    len: usize,
}

impl<T> PriorityQueue<T> {
    pub fn new(priorities: &Priorities) -> Self {
        let levels: Vec<Level<T>> = priorities
            .levels
            .iter()
            .map(|policy| Level { policy: policy.clone(), on_time: VecDeque::new(), delayed: VecDeque::new() })
            .collect();
        let deadlines = levels.iter().any(|l| l.policy.default_timeout.is_some());
        PriorityQueue { levels, deadlines, len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `item` at `level`; gives it back when that level is full.
    pub fn push(&mut self, level: usize, item: T, requested_timeout: Option<Duration>, now: Instant) -> Result<(), T> {
        let level = &mut self.levels[level];
        if level.policy.max_queue_size != 0 && level.len() >= level.policy.max_queue_size {
            return Err(item);
        }
        level.on_time.push_back((item, level.policy.deadline(now, requested_timeout)));
        self.len += 1;
        Ok(())
    }

    /// The waiting requests in the order they are to be served.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.levels.iter().flat_map(|l| l.on_time.iter().map(|(item, _)| item).chain(l.delayed.iter()))
    }

    /// Takes out the request at `position` in serving order.
    pub fn remove(&mut self, mut position: usize) -> Option<T> {
        for level in &mut self.levels {
            if position < level.on_time.len() {
                self.len -= 1;
                return level.on_time.remove(position).map(|(item, _)| item);
            }
            position -= level.on_time.len();
            if position < level.delayed.len() {
                self.len -= 1;
                return level.delayed.remove(position);
            }
            position -= level.delayed.len();
        }
        None
    }

    /// Applies every deadline that has passed by `now`: returns the requests to reject and moves the ones
    /// under DELAY to the back of their level.
    pub fn expire(&mut self, now: Instant) -> Vec<T> {
        let mut rejected = Vec::new();
        if !self.deadlines {
            return rejected;
        }
        for level in &mut self.levels {
            let mut kept = VecDeque::with_capacity(level.on_time.len());
            for (item, deadline) in level.on_time.drain(..) {
                match deadline {
                    Some(d) if d <= now && level.policy.delay_on_timeout => level.delayed.push_back(item),
                    Some(d) if d <= now => rejected.push(item),
                    _ => kept.push_back((item, deadline)),
                }
            }
            level.on_time = kept;
        }
        self.len -= rejected.len();
        rejected
    }

    /// The earliest deadline of a waiting request, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        if !self.deadlines {
            return None;
        }
        self.levels.iter().flat_map(|l| l.on_time.iter().filter_map(|(_, d)| *d)).min()
    }

    /// Empties the queue, in serving order.
    pub fn drain(&mut self) -> Vec<T> {
        self.len = 0;
        self.levels
            .iter_mut()
            .flat_map(|l| l.on_time.drain(..).map(|(item, _)| item).chain(l.delayed.drain(..)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn queue(levels: Vec<QueuePolicy>, default_level: usize) -> PriorityQueue<&'static str> {
        PriorityQueue::new(&Priorities { levels, default_level })
    }

    #[test]
    fn serves_level_by_level_then_oldest_first() {
        let mut q = queue(vec![QueuePolicy::default(), QueuePolicy::default()], 1);
        let now = Instant::now();
        for (level, name) in [(1, "low-a"), (0, "high-a"), (1, "low-b"), (0, "high-b")] {
            q.push(level, name, None, now).unwrap();
        }
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), ["high-a", "high-b", "low-a", "low-b"]);
        assert_eq!(q.remove(2), Some("low-a"));
        assert_eq!(q.drain(), ["high-a", "high-b", "low-b"]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_full_level_refuses_and_the_others_still_accept() {
        let mut q = queue(vec![QueuePolicy { max_queue_size: 1, ..Default::default() }, QueuePolicy::default()], 1);
        let now = Instant::now();
        q.push(0, "first", None, now).unwrap();
        assert_eq!(q.push(0, "second", None, now), Err("second"));
        q.push(1, "elsewhere", None, now).unwrap();
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn expired_requests_are_rejected_or_delayed_by_policy() {
        let reject = QueuePolicy { default_timeout: Some(ms(10)), ..Default::default() };
        let delay = QueuePolicy { delay_on_timeout: true, ..reject.clone() };
        let mut q = queue(vec![reject, delay], 0);
        let now = Instant::now();
        q.push(0, "rejected", None, now).unwrap();
        q.push(1, "delayed", None, now).unwrap();
        q.push(1, "on time", None, now + ms(5)).unwrap();
        assert_eq!(q.next_deadline(), Some(now + ms(10)));
        assert_eq!(q.expire(now + ms(10)), ["rejected"]);
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), ["on time", "delayed"]);
        assert_eq!(q.next_deadline(), Some(now + ms(15)));
    }

    #[test]
    fn a_request_may_only_shorten_the_default_timeout_when_allowed() {
        let now = Instant::now();
        let strict = QueuePolicy { default_timeout: Some(ms(100)), ..Default::default() };
        let lenient = QueuePolicy { allow_timeout_override: true, ..strict.clone() };
        assert_eq!(strict.deadline(now, Some(ms(10))), Some(now + ms(100)));
        assert_eq!(lenient.deadline(now, Some(ms(10))), Some(now + ms(10)));
        assert_eq!(lenient.deadline(now, Some(ms(500))), Some(now + ms(100)));
        let none = QueuePolicy { allow_timeout_override: true, ..Default::default() };
        assert_eq!(none.deadline(now, Some(ms(10))), None);
    }

    #[test]
    fn priority_zero_or_out_of_range_means_the_default_level() {
        let p = Priorities { levels: vec![QueuePolicy::default(); 3], default_level: 1 };
        assert_eq!((p.level_of(0), p.level_of(1), p.level_of(3), p.level_of(4)), (1, 0, 2, 1));
    }
}
