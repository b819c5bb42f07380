//! The `triton` trace mode: each trace's records in Triton's trace JSON (an opening record naming the
//! model, then one record per timestamp or tensor), gathered per process and written to the trace file
//! every `log_frequency` traces (to `<file>.<n>`) or at shutdown (to `<file>`).

use std::time::Instant;

use serde_json::{json, Value};

use crate::tensor::Tensor;

/// One trace's records, in the order Triton writes them.
pub struct Records {
    id: u64,
    entries: Vec<Value>,
    /// Whether the opening record is in: a request that never reached a model leaves nothing to write.
    opened: bool,
    pub log_frequency: u32,
    pub file: String,
}

impl Records {
    pub fn new(id: u64, log_frequency: u32, file: String) -> Self {
        Records { id, entries: Vec::new(), opened: false, log_frequency, file }
    }

    /// Puts the opening record first, once the model and version are known; `parent_id` is the trace of
    /// the request this one was made for (0: none).
    pub fn open(&mut self, model: &str, version: i64, request_id: &str, parent_id: u64) {
        let mut opening = json!({"id": self.id, "model_name": model, "model_version": version});
        if !request_id.is_empty() {
            opening["request_id"] = request_id.into();
        }
        if parent_id != 0 {
            opening["parent_id"] = parent_id.into();
        }
        self.entries.insert(0, opening);
        self.opened = true;
    }

    pub fn timestamp(&mut self, name: &str, at: Instant) {
        let entry = json!({"id": self.id, "timestamps": [{"name": name, "ns": super::monotonic_ns(at)}]});
        self.entries.push(entry);
    }

    pub fn tensors<'t>(&mut self, activity: &str, tensors: impl IntoIterator<Item = &'t Tensor>) {
        for tensor in tensors {
            let shape = tensor.shape.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
            let tensor = json!({"name": tensor.name, "data": tensor.values_text(), "shape": shape,
                                "dtype": tensor.datatype.kserve_name()});
            self.entries.push(json!({"id": self.id, "activity": activity, "tensor": tensor}));
        }
    }
}

/// The traces gathered since the file was last written.
#[derive(Default)]
pub struct Writer {
    entries: Vec<Value>,
    traces: u32,
    /// The index of the next `<file>.<n>`.
    index: u32,
}

impl Writer {
    /// Keeps a finished trace's records (taking them), writing the file when `log_frequency` traces have
    /// gathered.
    pub fn add(&mut self, records: &mut Records) {
        if !records.opened {
            return;
        }
        self.entries.append(&mut records.entries);
        self.traces += 1;
        if records.log_frequency > 0 && self.traces >= records.log_frequency {
            let index = self.index;
            self.index += 1;
            self.write(&records.file, Some(index));
        }
    }

    /// Writes what was gathered since the last write, at shutdown: to `<file>` when traces are written
    /// only then (`log_frequency` 0), else to the next `<file>.<n>`.
    pub fn flush(&mut self, file: &str, log_frequency: u32) {
        if self.entries.is_empty() {
            return;
        }
        let index = (log_frequency > 0).then_some(self.index);
        self.write(file, index);
    }

    /// Writes what was gathered to `file`, or to `<file>.<index>` when written every few traces.
    fn write(&mut self, file: &str, index: Option<u32>) {
        let entries = std::mem::take(&mut self.entries);
        self.traces = 0;
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
}
