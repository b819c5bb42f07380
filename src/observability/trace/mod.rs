//! Triton's trace extension in its `triton` mode: requests sampled by the trace settings (`settings`) record
//! when they reached the scheduler, were queued, started and ended computing, and ended
//! (`REQUEST_START`, `QUEUE_START`, `COMPUTE_START`, `COMPUTE_END`, `REQUEST_END`, in nanoseconds of a
//! monotonic clock), and at the TENSORS level their input and output tensors; the traces are written as
//! Triton's trace JSON to the trace file, every `log_frequency` traces (to `<file>.<n>`) or at shutdown
//! (to `<file>`).
//!
//! There is one tracer per process, like the log. With every level OFF, sampling a request is one atomic
//! load: tracing at its default costs a request nothing else.

pub mod settings;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::tensor::Tensor;
pub use settings::{Change, Level, Overrides, Settings};

static TRACER: OnceLock<Tracer> = OnceLock::new();

/// Starts the process's tracer with the command line's settings (once; later calls change nothing).
pub fn start(startup: Settings) {
    let _ = TRACER.set(Tracer::new(startup));
}

/// The process's tracer (all OFF until `start`).
pub fn tracer() -> &'static Tracer {
    TRACER.get_or_init(|| Tracer::new(Settings::default()))
}

pub struct Tracer {
    /// Whether any scope traces at all; false lets `sample` return at once.
    any_on: AtomicBool,
    state: Mutex<State>,
}

struct State {
    startup: Settings,
    global: Overrides,
    models: HashMap<String, Overrides>,
    /// Per scope ("" for the global one): requests seen, and traces left (-1: no limit).
    counters: HashMap<String, (u64, i32)>,
    next_id: u64,
    written: Writer,
}

/// The traces gathered since the file was last written.
#[derive(Default)]
struct Writer {
    entries: Vec<Value>,
    traces: u32,
    /// The index of the next `<file>.<n>`.
    index: u32,
}

/// One sampled request's trace, filled in as it runs and handed back to `Tracer::finish`.
pub struct Trace {
    id: u64,
    level: Level,
    log_frequency: u32,
    file: String,
    entries: Vec<Value>,
}

impl Tracer {
    fn new(startup: Settings) -> Self {
        let any_on = AtomicBool::new(!startup.level.is_off());
        let state = State {
            startup,
            global: Overrides::default(),
            models: HashMap::new(),
            counters: HashMap::new(),
            next_id: 1,
            written: Writer::default(),
        };
        Tracer { any_on, state: Mutex::new(state) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The settings in force for `model` (the global ones for an empty name).
    pub fn settings(&self, model: &str) -> Settings {
        self.state().effective(model)
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

    /// A trace for this request to `model` if the settings sample it, with its opening record.
    pub fn sample(&self, model: &str, version: i64, request_id: &str) -> Option<Trace> {
        if !self.any_on.load(Ordering::Relaxed) {
            return None;
        }
        let mut state = self.state();
        let settings = state.effective(model);
        if settings.level.is_off() {
            return None;
        }
        let scope = if state.models.contains_key(model) { model.to_string() } else { String::new() };
        let (seen, left) = state.counters.entry(scope).or_insert((0, settings.count));
        *seen += 1;
        if settings.rate == 0 || *seen % u64::from(settings.rate) != 0 || *left == 0 {
            return None;
        }
        if *left > 0 {
            *left -= 1;
        }
        let id = state.next_id;
        state.next_id += 1;
        let mut opening = json!({"id": id, "model_name": model, "model_version": version});
        if !request_id.is_empty() {
            opening["request_id"] = request_id.into();
        }
        Some(Trace {
            id,
            level: settings.level,
            log_frequency: settings.log_frequency,
            file: settings.file,
            entries: vec![opening],
        })
    }

    /// Keeps a finished trace, writing the file when `log_frequency` traces have gathered.
    pub fn finish(&self, trace: Trace) {
        let mut state = self.state();
        let writer = &mut state.written;
        writer.entries.extend(trace.entries);
        writer.traces += 1;
        if trace.log_frequency > 0 && writer.traces >= trace.log_frequency {
            let index = writer.index;
            writer.index += 1;
            write_file(&trace.file, Some(index), writer);
        }
    }

    /// Writes what was gathered since the last write, at shutdown: to `<file>` when traces are written
    /// only then, else to the next `<file>.<n>`.
    pub fn flush(&self) {
        let mut state = self.state();
        let global = state.effective("");
        let writer = &mut state.written;
        if writer.entries.is_empty() {
            return;
        }
        let index = (global.log_frequency > 0).then_some(writer.index);
        write_file(&global.file, index, writer);
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

/// Writes what `writer` gathered to `file`, or to `<file>.<index>` when written every few traces.
fn write_file(file: &str, index: Option<u32>, writer: &mut Writer) {
    let entries = std::mem::take(&mut writer.entries);
    writer.traces = 0;
    if file.is_empty() {
        tracing::warn!("{} trace records dropped: no trace file (--trace-config triton,file=PATH)", entries.len());
        return;
    }
    let path = match index {
        Some(index) => format!("{file}.{index}"),
        None => file.to_string(),
    };
    if let Err(e) = std::fs::write(&path, Value::Array(entries).to_string()) {
        tracing::error!("cannot write the trace file {path}: {e}");
    }
}

impl Trace {
    /// Records that the request passed `name` at `at`.
    pub fn timestamp(&mut self, name: &str, at: Instant) {
        if self.level.timestamps {
            let entry = json!({"id": self.id, "timestamps": [{"name": name, "ns": monotonic_ns(at)}]});
            self.entries.push(entry);
        }
    }

    /// Records `tensors` as `activity` (TENSOR_QUEUE_INPUT, TENSOR_BACKEND_OUTPUT) at the TENSORS level.
    pub fn tensors<'t>(&mut self, activity: &str, tensors: impl IntoIterator<Item = &'t Tensor>) {
        if !self.level.tensors {
            return;
        }
        for tensor in tensors {
            let shape = tensor.shape.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
            let tensor = json!({"name": tensor.name, "data": tensor.values_text(), "shape": shape,
                                "dtype": tensor.datatype.kserve_name()});
            self.entries.push(json!({"id": self.id, "activity": activity, "tensor": tensor}));
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
