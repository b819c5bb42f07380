//! Prometheus metrics, with Triton's metric names and `model` / `version` labels so existing dashboards and
//! alerts keep working, plus what Triton lacks: a histogram of executed batch sizes. Built on the
//! `prometheus` crate; each model version holds handles bound to its labels, so recording is a few atomic
//! adds. `frontends::metrics` serves them on `--metrics-port`.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use super::stats::Timing;

const LABELS: [&str; 2] = ["model", "version"];

/// Every metric family, registered once in the server's registry.
pub struct Metrics {
    registry: Registry,
    success: IntCounterVec,
    failure: IntCounterVec,
    inference_count: IntCounterVec,
    exec_count: IntCounterVec,
    request_us: IntCounterVec,
    queue_us: IntCounterVec,
    compute_input_us: IntCounterVec,
    compute_infer_us: IntCounterVec,
    compute_output_us: IntCounterVec,
    cache_hits: IntCounterVec,
    cache_hit_us: IntCounterVec,
    cache_misses: IntCounterVec,
    cache_miss_us: IntCounterVec,
    pending: IntGaugeVec,
    sequences: IntGaugeVec,
    batch_size: HistogramVec,
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounterVec {
    let vec = IntCounterVec::new(Opts::new(name, help), &LABELS).expect("valid metric definition");
    registry.register(Box::new(vec.clone())).expect("each metric is registered once");
    vec
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let pending = IntGaugeVec::new(
            Opts::new(
                "nv_inference_pending_request_count",
                "Instantaneous number of pending requests awaiting execution per-model.",
            ),
            &LABELS,
        )
        .expect("valid metric definition");
        registry.register(Box::new(pending.clone())).expect("registered once");
        let sequences = IntGaugeVec::new(
            Opts::new(
                "tessera_sequence_active",
                "Sequences of a model with sequence batching that hold an instance slot or wait for one.",
            ),
            &LABELS,
        )
        .expect("valid metric definition");
        registry.register(Box::new(sequences.clone())).expect("registered once");
        let buckets = vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];
        let batch_size = HistogramVec::new(
            HistogramOpts::new(
                "tessera_batch_size",
                "Number of inferences in each model execution (dynamic batching makes it exceed 1).",
            )
            .buckets(buckets),
            &LABELS,
        )
        .expect("valid metric definition");
        registry.register(Box::new(batch_size.clone())).expect("registered once");
        Metrics {
            success: counter(
                &registry,
                "nv_inference_request_success",
                "Number of successful inference requests, all batch sizes",
            ),
            failure: counter(
                &registry,
                "nv_inference_request_failure",
                "Number of failed inference requests, all batch sizes",
            ),
            inference_count: counter(
                &registry,
                "nv_inference_count",
                "Number of inferences performed (does not include cached requests)",
            ),
            exec_count: counter(
                &registry,
                "nv_inference_exec_count",
                "Number of model executions performed (does not include cached requests)",
            ),
            request_us: counter(
                &registry,
                "nv_inference_request_duration_us",
                "Cumulative inference request duration in microseconds",
            ),
            queue_us: counter(
                &registry,
                "nv_inference_queue_duration_us",
                "Cumulative inference queuing duration in microseconds",
            ),
            compute_input_us: counter(
                &registry,
                "nv_inference_compute_input_duration_us",
                "Cumulative compute input duration in microseconds",
            ),
            compute_infer_us: counter(
                &registry,
                "nv_inference_compute_infer_duration_us",
                "Cumulative compute inference duration in microseconds",
            ),
            compute_output_us: counter(
                &registry,
                "nv_inference_compute_output_duration_us",
                "Cumulative inference compute output duration in microseconds",
            ),
            cache_hits: counter(&registry, "nv_cache_num_hits_per_model", "Number of cache hits per model"),
            cache_hit_us: counter(
                &registry,
                "nv_cache_hit_duration_per_model",
                "Total cache hit duration per model, in microseconds",
            ),
            cache_misses: counter(&registry, "nv_cache_num_misses_per_model", "Number of cache misses per model"),
            cache_miss_us: counter(
                &registry,
                "nv_cache_miss_duration_per_model",
                "Total cache miss (insert+lookup) duration per model, in microseconds",
            ),
            pending,
            sequences,
            batch_size,
            registry,
        }
    }

    /// Handles bound to one model version's labels.
    pub fn for_model(&self, model: &str, version: i64) -> ModelMetrics {
        let version = version.to_string();
        let labels = [model, version.as_str()];
        ModelMetrics {
            success: self.success.with_label_values(&labels),
            failure: self.failure.with_label_values(&labels),
            inference_count: self.inference_count.with_label_values(&labels),
            exec_count: self.exec_count.with_label_values(&labels),
            request_us: self.request_us.with_label_values(&labels),
            queue_us: self.queue_us.with_label_values(&labels),
            compute_input_us: self.compute_input_us.with_label_values(&labels),
            compute_infer_us: self.compute_infer_us.with_label_values(&labels),
            compute_output_us: self.compute_output_us.with_label_values(&labels),
            cache_hits: self.cache_hits.with_label_values(&labels),
            cache_hit_us: self.cache_hit_us.with_label_values(&labels),
            cache_misses: self.cache_misses.with_label_values(&labels),
            cache_miss_us: self.cache_miss_us.with_label_values(&labels),
            pending: self.pending.with_label_values(&labels),
            sequences: self.sequences.with_label_values(&labels),
            batch_size: self.batch_size.with_label_values(&labels),
        }
    }

    /// The text exposition format of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("encoding to a Vec cannot fail");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

pub struct ModelMetrics {
    success: IntCounter,
    failure: IntCounter,
    inference_count: IntCounter,
    exec_count: IntCounter,
    request_us: IntCounter,
    queue_us: IntCounter,
    compute_input_us: IntCounter,
    compute_infer_us: IntCounter,
    compute_output_us: IntCounter,
    cache_hits: IntCounter,
    cache_hit_us: IntCounter,
    cache_misses: IntCounter,
    cache_miss_us: IntCounter,
    pub pending: IntGauge,
    /// Live sequences (sequence batching only).
    pub sequences: IntGauge,
    batch_size: Histogram,
}

impl ModelMetrics {
    pub fn executed(&self, batch_size: u64, timing: &Timing) {
        self.exec_count.inc();
        self.inference_count.inc_by(batch_size);
        self.compute_input_us.inc_by(timing.compute_input.as_micros() as u64);
        self.compute_infer_us.inc_by(timing.compute_infer.as_micros() as u64);
        self.compute_output_us.inc_by(timing.compute_output.as_micros() as u64);
        self.batch_size.observe(batch_size as f64);
    }

    pub fn cache_hit(&self, lookup: std::time::Duration) {
        self.cache_hits.inc();
        self.cache_hit_us.inc_by(lookup.as_micros() as u64);
    }

    pub fn cache_miss(&self, spent: std::time::Duration) {
        self.cache_misses.inc();
        self.cache_miss_us.inc_by(spent.as_micros() as u64);
    }

    pub fn finished(&self, ok: bool, total: std::time::Duration, queue: std::time::Duration) {
        if ok {
            self.success.inc();
            self.queue_us.inc_by(queue.as_micros() as u64);
        } else {
            self.failure.inc();
        }
        self.request_us.inc_by(total.as_micros() as u64);
    }
}
