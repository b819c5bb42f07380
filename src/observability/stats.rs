//! Per-model-version statistics, Triton's statistics extension: how many requests succeeded or failed and
//! the time they spent queued and computing (input preparation, inference, output handling), per batch
//! size too, and the response cache's hits and misses. Plain atomics on the request path, except for
//! executions: each goes into its batch size's entry under one lock, and a snapshot derives the execution
//! and inference counts and the compute totals from those entries under the same lock, so it never sees an
//! execution half counted (perf_analyzer refuses a window whose compute_input, compute_infer and
//! compute_output counts differ). A snapshot is the `inference.ModelStatistics` message that both frontends
//! serve. The same events also feed the Prometheus metrics (`metrics`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::metrics::ModelMetrics;
use crate::proto::inference::{InferBatchStatistics, InferStatistics, ModelStatistics, StatisticDuration};

#[derive(Default)]
struct Tally {
    count: AtomicU64,
    ns: AtomicU64,
}

impl Tally {
    fn add(&self, count: u64, elapsed: Duration) {
        self.count.fetch_add(count, Ordering::Relaxed);
        self.ns.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Option<StatisticDuration> {
        Some(StatisticDuration { count: self.count.load(Ordering::Relaxed), ns: self.ns.load(Ordering::Relaxed) })
    }
}

/// Where one execution's time went, once it left the queue.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timing {
    pub compute_input: Duration,
    pub compute_infer: Duration,
    pub compute_output: Duration,
}

impl Timing {
    fn add(&mut self, other: &Timing) {
        self.compute_input += other.compute_input;
        self.compute_infer += other.compute_infer;
        self.compute_output += other.compute_output;
    }
}

pub struct Stats {
    success: Tally,
    fail: Tally,
    queue: Tally,
    /// Per batch size: how many executions, and their compute times.
    batches: Mutex<BTreeMap<u64, (u64, Timing)>>,
    last_inference_ms: AtomicU64,
    pending: AtomicI64,
    cache_hit: Tally,
    cache_miss: Tally,
    metrics: ModelMetrics,
}

impl Stats {
    pub fn new(metrics: ModelMetrics) -> Self {
        Stats {
            success: Tally::default(),
            fail: Tally::default(),
            queue: Tally::default(),
            batches: Mutex::default(),
            last_inference_ms: AtomicU64::default(),
            pending: AtomicI64::default(),
            cache_hit: Tally::default(),
            cache_miss: Tally::default(),
            metrics,
        }
    }

    /// The gauge of live sequences, which the sequence batcher keeps.
    pub fn sequences(&self) -> &prometheus::IntGauge {
        &self.metrics.sequences
    }

    /// A request was accepted; it is pending until `finished`.
    pub fn started(&self) {
        self.pending.fetch_add(1, Ordering::Relaxed);
        self.metrics.pending.inc();
    }

    /// One execution of `batch_size` inferences (the sum of the batch dimensions it carried).
    pub fn executed(&self, batch_size: u64, timing: &Timing) {
        {
            let mut batches = self.batches.lock().expect("stats lock");
            let (count, total) = batches.entry(batch_size).or_default();
            *count += 1;
            total.add(timing);
        }
        self.metrics.executed(batch_size, timing);
    }

    /// A request finished, successfully or not, `total` after it arrived; `queue` is its time in the queue
    /// (zero if it never reached one).
    pub fn finished(&self, ok: bool, total: Duration, queue: Duration) {
        self.pending.fetch_sub(1, Ordering::Relaxed);
        self.metrics.pending.dec();
        if ok {
            self.success.add(1, total);
            self.queue.add(1, queue);
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
            self.last_inference_ms.store(now, Ordering::Relaxed);
        } else {
            self.fail.add(1, total);
        }
        self.metrics.finished(ok, total, queue);
    }

    /// A request answered from the response cache, `lookup` after it arrived.
    pub fn cache_hit(&self, lookup: Duration) {
        self.cache_hit.add(1, lookup);
        self.metrics.cache_hit(lookup);
    }

    /// A request the response cache did not hold; `spent` is the time looking it up and storing its answer.
    pub fn cache_miss(&self, spent: Duration) {
        self.cache_miss.add(1, spent);
        self.metrics.cache_miss(spent);
    }

    pub fn snapshot(&self, name: &str, version: i64) -> ModelStatistics {
        let batches = self.batches.lock().expect("stats lock");
        let (mut executions, mut inferences, mut total) = (0, 0, Timing::default());
        for (&batch_size, &(count, timing)) in batches.iter() {
            executions += count;
            inferences += batch_size * count;
            total.add(&timing);
        }
        let tally = |count: u64, d: Duration| Some(StatisticDuration { count, ns: d.as_nanos() as u64 });
        let batch_stats = batches
            .iter()
            .map(|(&batch_size, &(count, total))| InferBatchStatistics {
                batch_size,
                compute_input: tally(count, total.compute_input),
                compute_infer: tally(count, total.compute_infer),
                compute_output: tally(count, total.compute_output),
            })
            .collect();
        ModelStatistics {
            name: name.to_string(),
            version: version.to_string(),
            last_inference: self.last_inference_ms.load(Ordering::Relaxed),
            inference_count: inferences,
            execution_count: executions,
            inference_stats: Some(InferStatistics {
                success: self.success.snapshot(),
                fail: self.fail.snapshot(),
                queue: self.queue.snapshot(),
                compute_input: tally(executions, total.compute_input),
                compute_infer: tally(executions, total.compute_infer),
                compute_output: tally(executions, total.compute_output),
                cache_hit: self.cache_hit.snapshot(),
                cache_miss: self.cache_miss.snapshot(),
            }),
            batch_stats,
            memory_usage: Vec::new(),
            response_stats: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A snapshot taken while executions are being counted sees each one whole: its three compute counts
    /// and the execution count agree, as perf_analyzer requires of every window.
    #[test]
    fn a_snapshot_sees_each_execution_whole() {
        let stats = Arc::new(Stats::new(crate::observability::metrics::Metrics::new().for_model("m", 1)));
        let counting = {
            let stats = stats.clone();
            std::thread::spawn(move || {
                let timing = Timing { compute_input: Duration::from_nanos(1), ..Timing::default() };
                for _ in 0..200_000 {
                    stats.executed(1, &timing);
                }
            })
        };
        let mut snapshots = 0;
        while !counting.is_finished() || snapshots == 0 {
            let snapshot = stats.snapshot("m", 1);
            let inference = snapshot.inference_stats.expect("inference stats");
            let counts =
                [inference.compute_input, inference.compute_infer, inference.compute_output].map(|d| d.unwrap().count);
            assert_eq!(counts, [snapshot.execution_count; 3], "snapshot {snapshots}");
            assert_eq!(
                snapshot.batch_stats.first().map_or(0, |b| b.compute_infer.unwrap().count),
                snapshot.execution_count
            );
            snapshots += 1;
        }
        counting.join().unwrap();
        assert_eq!(stats.snapshot("m", 1).execution_count, 200_000);
    }
}
