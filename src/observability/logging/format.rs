//! How one log line reads. `default` and `ISO8601` are tritonserver's layouts, so that tools written for
//! Triton's logs read Tessera's: a level letter (E, W, I; verbose lines are I, as Triton's), a UTC time,
//! the process id and the source `file:line]`, then the message and its fields (`name=value`). Like
//! Triton, the message is written as a JSON string (quoted and escaped, so that a message cannot forge a
//! line) unless `TRITON_SERVER_ESCAPE_LOG_MESSAGES=0`; text fields are always quoted. `json` writes each line as one JSON object for log shippers.
//! The format can change while the server runs (the logging extension), so it is read per line.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The layouts `--log-format` and the logging extension name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Default,
    Iso8601,
    Json,
}

impl LogFormat {
    const ALL: [LogFormat; 3] = [LogFormat::Default, LogFormat::Iso8601, LogFormat::Json];

    /// The name as tritonserver spells it (`default`, `ISO8601`), or `json`.
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Default => "default",
            LogFormat::Iso8601 => "ISO8601",
            LogFormat::Json => "json",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        LogFormat::ALL.into_iter().find(|format| format.name() == name)
    }
}

/// The format in force, shared by the log and every line it writes.
#[derive(Clone)]
pub(super) struct SharedFormat(Arc<AtomicU8>);

impl SharedFormat {
    pub(super) fn new(format: LogFormat) -> Self {
        SharedFormat(Arc::new(AtomicU8::new(format as u8)))
    }

    pub(super) fn get(&self) -> LogFormat {
        LogFormat::ALL[self.0.load(Ordering::Relaxed) as usize]
    }

    pub(super) fn set(&self, format: LogFormat) {
        self.0.store(format as u8, Ordering::Relaxed);
    }
}

/// The event formatter: writes one line in the shared format.
pub(super) struct Lines {
    format: SharedFormat,
    escape: bool,
    pid: u32,
}

impl Lines {
    pub(super) fn new(format: SharedFormat) -> Self {
        let escape = std::env::var("TRITON_SERVER_ESCAPE_LOG_MESSAGES").map_or(true, |value| value != "0");
        Lines { format, escape, pid: std::process::id() }
    }
}

impl<S, N> FormatEvent<S, N> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let metadata = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let now = chrono::Utc::now();
        let file = metadata.file().map(|path| path.rsplit('/').next().unwrap_or(path)).unwrap_or(metadata.target());
        let line = metadata.line().unwrap_or(0);
        let format = self.format.get();
        if format == LogFormat::Json {
            let mut object = serde_json::Map::new();
            object.insert("timestamp".into(), now.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string().into());
            object.insert("level".into(), metadata.level().as_str().into());
            object.insert("pid".into(), self.pid.into());
            object.insert("file".into(), file.into());
            object.insert("line".into(), line.into());
            object.insert("target".into(), metadata.target().into());
            object.insert("message".into(), fields.message.into());
            for other in fields.others {
                object.entry(other.name).or_insert(other.value.into());
            }
            return writeln!(writer, "{}", serde_json::Value::Object(object));
        }
        let letter = match *metadata.level() {
            Level::ERROR => 'E',
            Level::WARN => 'W',
            _ => 'I',
        };
        match format {
            LogFormat::Iso8601 => write!(writer, "{} {letter}", now.format("%Y-%m-%dT%H:%M:%SZ"))?,
            _ => write!(writer, "{letter}{}", now.format("%m%d %H:%M:%S%.6f"))?,
        }
        write!(writer, " {} {file}:{line}] ", self.pid)?;
        if self.escape {
            write!(writer, "{}", serde_json::Value::String(fields.message))?;
        } else {
            write!(writer, "{}", fields.message)?;
        }
        for Other { name, value, text } in &fields.others {
            match text {
                true => write!(writer, " {name}={value:?}")?,
                false => write!(writer, " {name}={value}")?,
            }
        }
        writeln!(writer)
    }
}

/// An event's message and its other fields, as text.
#[derive(Default)]
struct Fields {
    message: String,
    others: Vec<Other>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, value.to_string(), true);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record(field, format!("{value:?}"), false);
    }
}

impl Fields {
    fn record(&mut self, field: &Field, value: String, text: bool) {
        match field.name() {
            "message" => self.message = value,
            name => self.others.push(Other { name, value, text }),
        }
    }
}

/// A field other than the message.
struct Other {
    name: &'static str,
    value: String,
    /// Recorded as text: quoted and escaped (Rust's `Debug`) in a line, so that it cannot forge one.
    text: bool,
}
