//! The server log, with tritonserver's switches: `--log-info`, `--log-warning` and `--log-error` turn each
//! level on or off, `--log-verbose N` adds debug lines (N ≥ 1) and trace lines (N ≥ 2) from the server and
//! its plugins, and `--log-file` sends everything to a file instead of standard error. Libraries' own
//! debug lines (wasmtime, cranelift, hyper, h2, tower) stay off even when verbose: they would bury ours.
//!
//! The level switches are a `tracing` filter whose answer is cached per call site, so a line that is off
//! costs nothing; the filter sits in a reloadable slot so that the settings can change while the server
//! runs (the logging extension), which rebuilds that cache. `TESSERA_LOG` (an `EnvFilter` directive) replaces
//! the switches, for debugging Tessera itself. Without a file, informational and verbose lines go to
//! standard output and warnings and errors to standard error, as tritonserver's do.

use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing::subscriber::Interest;
use tracing::Metadata;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Filter, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

mod format;

pub use format::LogFormat;
use format::{Lines, SharedFormat};

/// Which levels are logged, as tritonserver's flags say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Levels {
    pub info: bool,
    pub warning: bool,
    pub error: bool,
    pub verbose: u32,
}

/// Libraries whose debug and trace lines are never shown.
const QUIET_LIBRARIES: [&str; 6] = ["wasmtime", "cranelift", "hyper", "h2", "tower", "mio"];

impl Levels {
    fn allows(&self, metadata: &Metadata<'_>) -> bool {
        let level = *metadata.level();
        let verbose =
            |at: u32| self.verbose >= at && !QUIET_LIBRARIES.iter().any(|lib| metadata.target().starts_with(lib));
        match level {
            tracing::Level::ERROR => self.error,
            tracing::Level::WARN => self.warning,
            tracing::Level::INFO => self.info,
            tracing::Level::DEBUG => verbose(1),
            tracing::Level::TRACE => verbose(2),
        }
    }
}

impl<S> Filter<S> for Levels {
    fn enabled(&self, metadata: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        self.allows(metadata)
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.allows(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(match self.verbose {
            0 if self.info => LevelFilter::INFO,
            0 if self.warning => LevelFilter::WARN,
            0 if self.error => LevelFilter::ERROR,
            0 => LevelFilter::OFF,
            1 => LevelFilter::DEBUG,
            _ => LevelFilter::TRACE,
        })
    }
}

/// What the logging extension reports and changes: tritonserver's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSettings {
    /// The log file, empty for the standard streams.
    pub file: String,
    pub levels: Levels,
    pub format: LogFormat,
}

/// The running server's log: its levels, layout and destination, all changeable.
pub struct Log {
    levels: Mutex<Levels>,
    /// The filter's slot; `None` under `TESSERA_LOG`, whose directives then decide instead of `levels`.
    filter: Option<reload::Handle<Levels, Registry>>,
    format: SharedFormat,
    output: Output,
}

impl Log {
    /// Starts logging with `levels` and `format` to `file` (the standard streams when `None`). Fails if
    /// the file cannot be opened for appending.
    pub fn start(levels: Levels, format: LogFormat, file: Option<&str>) -> std::io::Result<Self> {
        let output = Output::default();
        if let Some(path) = file {
            output.send_to(Some(path))?;
        }
        let shared = SharedFormat::new(format);
        let lines =
            tracing_subscriber::fmt::layer().with_writer(output.clone()).event_format(Lines::new(shared.clone()));
        let filter = match EnvFilter::try_from_env("TESSERA_LOG") {
            Ok(directives) => {
                let _ = Registry::default().with(lines.with_filter(directives)).try_init();
                None
            }
            Err(_) => {
                let (filter, handle) = reload::Layer::new(levels);
                let _ = Registry::default().with(lines.with_filter(filter)).try_init();
                Some(handle)
            }
        };
        Ok(Log { levels: Mutex::new(levels), filter, format: shared, output })
    }

    /// The settings in force.
    pub fn settings(&self) -> LogSettings {
        LogSettings { file: self.output.path(), levels: *lock(&self.levels), format: self.format.get() }
    }

    /// Changes the levels and the layout of every line from now on.
    pub fn change(&self, levels: Levels, format: LogFormat) {
        *lock(&self.levels) = levels;
        if let Some(handle) = &self.filter {
            let _ = handle.reload(levels);
        }
        self.format.set(format);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Where log lines are written: a file when one is set, else standard output or error by level.
#[derive(Clone, Default)]
struct Output {
    file: Arc<Mutex<Option<(File, String)>>>,
}

impl Output {
    fn send_to(&self, path: Option<&str>) -> std::io::Result<()> {
        let file = match path {
            Some(path) => Some((std::fs::OpenOptions::new().create(true).append(true).open(path)?, path.to_string())),
            None => None,
        };
        *lock(&self.file) = file;
        Ok(())
    }

    fn path(&self) -> String {
        lock(&self.file).as_ref().map(|(_, path)| path.clone()).unwrap_or_default()
    }
}

/// One line's writer: the line is formatted into it, then written whole where the log goes.
pub struct LineWriter {
    line: Vec<u8>,
    file: Arc<Mutex<Option<(File, String)>>>,
    /// Where the line goes without a file: standard error for warnings and errors.
    to_stderr: bool,
}

impl Write for LineWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        let _ = match lock(&self.file).as_mut() {
            Some((file, _)) => file.write_all(&self.line),
            None if self.to_stderr => std::io::stderr().write_all(&self.line),
            None => std::io::stdout().lock().write_all(&self.line),
        };
    }
}

impl<'a> MakeWriter<'a> for Output {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> LineWriter {
        LineWriter { line: Vec::with_capacity(256), file: self.file.clone(), to_stderr: true }
    }

    fn make_writer_for(&'a self, metadata: &Metadata<'_>) -> LineWriter {
        let to_stderr = *metadata.level() <= tracing::Level::WARN;
        LineWriter { line: Vec::with_capacity(256), file: self.file.clone(), to_stderr }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    /// Whether `levels` let through a line at `level` from `target`.
    fn allows(levels: Levels, level: Level, target: &'static str) -> bool {
        struct Callsite;
        impl tracing::callsite::Callsite for Callsite {
            fn set_interest(&self, _: Interest) {}
            fn metadata(&self) -> &Metadata<'_> {
                unreachable!("only the identifier is used")
            }
        }
        static CALLSITE: Callsite = Callsite;
        let fields = tracing::field::FieldSet::new(&[], tracing::callsite::Identifier(&CALLSITE));
        levels.allows(&Metadata::new("line", target, level, None, None, None, fields, tracing::metadata::Kind::EVENT))
    }

    #[test]
    fn each_switch_controls_its_level() {
        let default = Levels { info: true, warning: true, error: true, verbose: 0 };
        assert!(allows(default, Level::INFO, "tessera") && allows(default, Level::ERROR, "tessera"));
        assert!(!allows(default, Level::DEBUG, "tessera"));
        let odd = Levels { info: false, warning: true, error: false, verbose: 1 };
        assert!(
            !allows(odd, Level::INFO, "tessera")
                && allows(odd, Level::WARN, "tessera")
                && !allows(odd, Level::ERROR, "tessera")
        );
        assert!(allows(odd, Level::DEBUG, "tessera::server") && allows(odd, Level::DEBUG, "plugin"));
        assert!(!allows(odd, Level::DEBUG, "h2::codec") && !allows(odd, Level::TRACE, "tessera"));
        let trace = Levels { verbose: 2, ..default };
        assert!(allows(trace, Level::TRACE, "tessera") && !allows(trace, Level::TRACE, "wasmtime"));
    }
}
