//! Triton's trace extension: requests sampled by the trace settings (`settings`) record when they were
//! received and answered by a frontend (`HTTP_RECV_START` … `HTTP_SEND_END`, `GRPC_WAITREAD_START` …
//! `GRPC_SEND_END`), reached the scheduler, were queued, computed and ended (`REQUEST_START`,
//! `QUEUE_START`, `COMPUTE_START`, `COMPUTE_INPUT_END`, `COMPUTE_OUTPUT_START`, `COMPUTE_END`,
//! `REQUEST_END`), and at the TENSORS level their input and output tensors. A request an ensemble step or a
//! BLS call makes is traced as a child of the request it was made for (`parent_id`).
//!
//! A frontend samples a client's request by its model's settings; the trace travels with the request and
//! is finished when its last holder lets it go. Where the records go is the mode: Triton's JSON trace file
//! (`file`) or spans exported to an OpenTelemetry collector (`otel`).
//!
//! There is one tracer per process, like the log. With every level OFF, sampling a request is one atomic
//! load: tracing at its default costs a request nothing else.

pub mod file;
pub mod otel;
pub mod settings;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;

use crate::tensor::Tensor;
pub use otel::Exporter;
pub use settings::{Change, Level, Mode, Overrides, Settings};

static TRACER: OnceLock<Tracer> = OnceLock::new();

/// Starts the process's tracer with the command line's settings, exporting spans from `runtime` in the
/// `opentelemetry` mode (once; later calls change nothing).
pub fn start(startup: Settings, exporter: Exporter, runtime: tokio::runtime::Handle) -> Result<(), String> {
    if startup.mode == Mode::OpenTelemetry {
        otel::start(&exporter, runtime)?;
    }
    let _ = TRACER.set(Tracer::new(startup, exporter));
    Ok(())
}

/// The process's tracer (all OFF until `start`).
pub fn tracer() -> &'static Tracer {
    TRACER.get_or_init(|| Tracer::new(Settings::default(), Exporter::default()))
}

pub struct Tracer {
    /// Whether any scope traces at all; false lets `sample` return at once.
    any_on: AtomicBool,
    next_id: AtomicU64,
    exporter: Exporter,
    state: Mutex<State>,
}

struct State {
    startup: Settings,
    global: Overrides,
    models: HashMap<String, Overrides>,
    /// Per scope ("" for the global one): requests seen, and traces left (-1: no limit).
    counters: HashMap<String, (u64, i32)>,
    written: file::Writer,
}

/// One sampled request's trace, shared by whatever serves the request; the last clone to go finishes it.
#[derive(Clone)]
pub struct Trace(Arc<Shared>);

struct Shared {
    id: u64,
    /// The trace of the request this one was made for; 0 for a client's request.
    parent_id: u64,
    level: Level,
    records: Mutex<Records>,
}

/// Where a trace's records go, by the mode.
enum Records {
    File(file::Records),
    Spans(Box<otel::Spans>),
}

impl Tracer {
    fn new(startup: Settings, exporter: Exporter) -> Self {
        let any_on = AtomicBool::new(!startup.level.is_off());
        let state = State {
            startup,
            global: Overrides::default(),
            models: HashMap::new(),
            counters: HashMap::new(),
            written: file::Writer::default(),
        };
        Tracer { any_on, next_id: AtomicU64::new(1), exporter, state: Mutex::new(state) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether any scope traces: a frontend notes its timestamps only then.
    pub fn is_on(&self) -> bool {
        self.any_on.load(Ordering::Relaxed)
    }

    /// The settings in force for `model` (the global ones for an empty name).
    pub fn settings(&self, model: &str) -> Settings {
        self.state().effective(model)
    }

    /// The exporter's settings as the trace extension lists them (none in the triton mode).
    pub fn exporter_options(&self) -> Vec<(&'static str, String)> {
        match self.settings("").mode {
            Mode::Triton => Vec::new(),
            Mode::OpenTelemetry => self.exporter.options(),
        }
    }

    /// Applies `change` to `model`'s overrides (the global ones for an empty name). Answers the settings now
    /// in force there.
    pub fn change(&self, model: &str, change: &Change) -> Settings {
        let mut state = self.state();
        match model {
            "" => change.apply(&mut state.global),
            model => {
                let overrides = state.models.entry(model.to_string()).or_default();
                change.apply(overrides);
                if overrides.is_empty() {
                    state.models.remove(model);
                }
            }
        }
        // The scope's sampling starts again from its new settings. A global change reaches every model that
        // falls back to a global field, so every scope starts again; a model's reaches that model alone.
        match model {
            "" => state.counters.clear(),
            model => drop(state.counters.remove(model)),
        }
        let on = !state.effective("").level.is_off() || state.models.keys().any(|m| !state.effective(m).level.is_off());
        self.any_on.store(on, Ordering::Relaxed);
        state.effective(model)
    }

    /// A trace for a client's request to `model`, received from `received`, if the settings sample it. In
    /// the `opentelemetry` mode a request carrying a `traceparent` header is always traced, under the
    /// client's span. Frontends ask `is_on` first, which spares them this lock while nothing traces.
    pub fn sample(&self, model: &str, headers: &axum::http::HeaderMap, received: Instant) -> Option<Trace> {
        let mut state = self.state();
        let settings = state.effective(model);
        if settings.level.is_off() {
            return None;
        }
        let client = match settings.mode {
            Mode::OpenTelemetry => otel::propagated(headers),
            Mode::Triton => None,
        };
        let scope = if state.models.contains_key(model) { model.to_string() } else { String::new() };
        let (seen, left) = state.counters.entry(scope).or_insert((0, settings.count));
        *seen += 1;
        let sampled = settings.rate != 0 && *seen % u64::from(settings.rate) == 0 && *left != 0;
        if !sampled && client.is_none() {
            return None;
        }
        if sampled && *left > 0 {
            *left -= 1;
        }
        drop(state);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let records = match settings.mode {
            Mode::Triton => Records::File(file::Records::new(id, settings.log_frequency, settings.file)),
            Mode::OpenTelemetry => Records::Spans(Box::new(otel::Spans::for_client(received, client)?)),
        };
        Some(Trace(Arc::new(Shared { id, parent_id: 0, level: settings.level, records: Mutex::new(records) })))
    }

    /// Writes what was gathered since the last write, and exports the spans still waiting, at shutdown.
    pub fn flush(&self) {
        let mut state = self.state();
        let global = state.effective("");
        state.written.flush(&global.file, global.log_frequency);
        drop(state);
        otel::flush();
    }
}

impl State {
    fn effective(&self, model: &str) -> Settings {
        let global = self.global.over(&self.startup);
        match self.models.get(model) {
            Some(overrides) if !model.is_empty() => overrides.over(&global),
            _ => global,
        }
    }
}

impl Trace {
    fn records(&self) -> MutexGuard<'_, Records> {
        self.0.records.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a frontend's timestamp (`HTTP_RECV_START`, `INFER_RESPONSE_COMPLETE`, `GRPC_SEND_END`, …).
    pub fn frontend(&self, name: &'static str, at: Instant) {
        if !self.0.level.timestamps {
            return;
        }
        match &mut *self.records() {
            Records::File(records) => records.timestamp(name, at),
            Records::Spans(spans) => spans.frontend_event(name, at),
        }
    }

    /// Records that the request reached `model`'s scheduler at `at` (`REQUEST_START`).
    pub fn start(&self, model: &str, version: i64, request_id: &str, at: Instant) {
        let Shared { id, parent_id, level, .. } = *self.0;
        match &mut *self.records() {
            Records::File(records) => {
                records.open(model, version, request_id, parent_id);
                if level.timestamps {
                    records.timestamp("REQUEST_START", at);
                }
            }
            Records::Spans(spans) if level.timestamps => {
                let mut attributes = vec![
                    KeyValue::new("triton.model_name", model.to_string()),
                    KeyValue::new("triton.model_version", version),
                    KeyValue::new("triton.trace_id", id as i64),
                    KeyValue::new("triton.trace_parent_id", parent_id as i64),
                ];
                if !request_id.is_empty() {
                    attributes.push(KeyValue::new("triton.request_id", request_id.to_string()));
                }
                spans.open_model(at, attributes, model);
                spans.event("REQUEST_START", at);
            }
            Records::Spans(_) => {}
        }
    }

    /// Records that the request passed `name` at `at` in the server.
    pub fn timestamp(&self, name: &'static str, at: Instant) {
        if !self.0.level.timestamps {
            return;
        }
        match &mut *self.records() {
            Records::File(records) => records.timestamp(name, at),
            Records::Spans(spans) => spans.event(name, at),
        }
    }

    /// Records `tensors` as `activity` (TENSOR_QUEUE_INPUT, TENSOR_BACKEND_OUTPUT) at the TENSORS level, in
    /// the triton mode (OpenTelemetry spans carry no tensors, as in Triton).
    pub fn tensors<'t>(&self, activity: &str, tensors: impl IntoIterator<Item = &'t Tensor>) {
        if !self.0.level.tensors {
            return;
        }
        if let Records::File(records) = &mut *self.records() {
            records.tensors(activity, tensors);
        }
    }

    /// The trace of a request made while serving this one (an ensemble step's).
    pub fn child(&self) -> Trace {
        let id = tracer().next_id.fetch_add(1, Ordering::Relaxed);
        let records = match &*self.records() {
            Records::File(records) => {
                Records::File(file::Records::new(id, records.log_frequency, records.file.clone()))
            }
            Records::Spans(spans) => Records::Spans(Box::new(spans.for_child())),
        };
        Trace(Arc::new(Shared { id, parent_id: self.0.id, level: self.0.level, records: Mutex::new(records) }))
    }
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Trace({})", self.0.id)
    }
}

impl Drop for Shared {
    /// Finishes the trace: its records join the trace file's. (Spans end as they drop, after this, and go
    /// to the exporter.)
    fn drop(&mut self) {
        if let Records::File(records) = self.records.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()) {
            tracer().state().written.add(records);
        }
    }
}

/// `at` on the process's monotonic clock, in nanoseconds since the clock's start: `Instant`s are read
/// against one anchor, so traces from every thread are ordered and never go back.
fn monotonic_ns(at: Instant) -> u64 {
    static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();
    let (instant, ns) = *ANCHOR.get_or_init(|| {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
        (Instant::now(), wall)
    });
    match at.checked_duration_since(instant) {
        Some(after) => ns + after.as_nanos() as u64,
        None => ns - instant.duration_since(at).as_nanos() as u64,
    }
}

/// `at` as wall-clock time, on the same anchor as `monotonic_ns` (OpenTelemetry timestamps are wall-clock).
fn wall_clock(at: Instant) -> SystemTime {
    UNIX_EPOCH + std::time::Duration::from_nanos(monotonic_ns(at))
}
