//! Per-model-version statistics, Triton's statistics extension: how many requests succeeded or failed and
//! the time they spent queued and computing (input preparation, inference, output handling), per batch
//! size too, and the response cache's hits and misses. Plain atomics on the request path; a snapshot is the `inference.ModelStatistics` message that
//! both frontends serve. The same events also feed the Prometheus metrics (`metrics`).

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

pub struct Stats {
    success: Tally,
    fail: Tally,
    queue: Tally,
    compute_input: Tally,
    compute_infer: Tally,
    compute_output: Tally,
    inference_count: AtomicU64,
    execution_count: AtomicU64,
    last_inference_ms: AtomicU64,
    pending: AtomicI64,
    cache_hit: Tally,
    cache_miss: Tally,
    /// Per batch size: how many executions, and their compute times.
    batches: Mutex<BTreeMap<u64, (u64, Timing)>>,
    metrics: ModelMetrics,
}

impl Stats {
    pub fn new(metrics: ModelMetrics) -> Self {
        Stats {
            success: Tally::default(),
            fail: Tally::default(),
            queue: Tally::default(),
            compute_input: Tally::default(),
            compute_infer: Tally::default(),
            compute_output: Tally::default(),
            inference_count: AtomicU64::default(),
            execution_count: AtomicU64::default(),
            last_inference_ms: AtomicU64::default(),
            pending: AtomicI64::default(),
            cache_hit: Tally::default(),
            cache_miss: Tally::default(),
            batches: Mutex::default(),
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
        self.execution_count.fetch_add(1, Ordering::Relaxed);
        self.inference_count.fetch_add(batch_size, Ordering::Relaxed);
        self.compute_input.add(1, timing.compute_input);
        self.compute_infer.add(1, timing.compute_infer);
        self.compute_output.add(1, timing.compute_output);
        {
            let mut batches = self.batches.lock().expect("stats lock");
            let (count, total) = batches.entry(batch_size).or_default();
            *count += 1;
            total.compute_input += timing.compute_input;
            total.compute_infer += timing.compute_infer;
            total.compute_output += timing.compute_output;
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
        let batch_stats = self
            .batches
            .lock()
            .expect("stats lock")
            .iter()
            .map(|(&batch_size, &(count, total))| {
                let duration = |d: Duration| Some(StatisticDuration { count, ns: d.as_nanos() as u64 });
                InferBatchStatistics {
                    batch_size,
                    compute_input: duration(total.compute_input),
                    compute_infer: duration(total.compute_infer),
                    compute_output: duration(total.compute_output),
                }
            })
            .collect();
        ModelStatistics {
            name: name.to_string(),
            version: version.to_string(),
            last_inference: self.last_inference_ms.load(Ordering::Relaxed),
            inference_count: self.inference_count.load(Ordering::Relaxed),
            execution_count: self.execution_count.load(Ordering::Relaxed),
            inference_stats: Some(InferStatistics {
                success: self.success.snapshot(),
                fail: self.fail.snapshot(),
                queue: self.queue.snapshot(),
                compute_input: self.compute_input.snapshot(),
                compute_infer: self.compute_infer.snapshot(),
                compute_output: self.compute_output.snapshot(),
                cache_hit: self.cache_hit.snapshot(),
                cache_miss: self.cache_miss.snapshot(),
            }),
            batch_stats,
            memory_usage: Vec::new(),
            response_stats: Default::default(),
        }
    }
}
