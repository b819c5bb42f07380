//! Trace settings as tritonserver has them: a level (OFF, or TIMESTAMPS and/or TENSORS), a sampling rate
//! (every N-th request is traced), a count (how many traces are left; -1: no limit), a log frequency (write
//! the trace file every N traces; 0: at shutdown), the trace file and the mode (where traces go). The
//! server starts with the command line's settings; the trace extension overrides fields globally or per
//! model, and clearing an override falls back to the global value (for a model) or the start-up value
//! (globally), as Triton's do. The mode is fixed at start-up.

/// Where traces go: Triton's JSON trace file, or spans exported to an OpenTelemetry collector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Triton,
    OpenTelemetry,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Triton => "triton",
            Mode::OpenTelemetry => "opentelemetry",
        }
    }
}

/// What a trace records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Level {
    pub timestamps: bool,
    pub tensors: bool,
}

impl Level {
    pub fn is_off(self) -> bool {
        !self.timestamps && !self.tensors
    }

    /// Triton's names: `["OFF"]` or any of TIMESTAMPS and TENSORS.
    pub fn names(self) -> Vec<&'static str> {
        if self.is_off() {
            return vec!["OFF"];
        }
        [(self.timestamps, "TIMESTAMPS"), (self.tensors, "TENSORS")]
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name))
            .collect()
    }

    /// Reads Triton's names, with its message for OFF beside another level; unknown names are ignored, as
    /// Triton ignores them.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let names: Vec<&str> = names.into_iter().collect();
        let mut level = Level::default();
        for name in &names {
            match *name {
                "OFF" if names.len() > 1 => return Err("Expect only one trace level 'OFF' is specified".into()),
                "TIMESTAMPS" => level.timestamps = true,
                "TENSORS" => level.tensors = true,
                _ => {}
            }
        }
        Ok(level)
    }
}

/// Every setting, as in force for some scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub level: Level,
    pub rate: u32,
    pub count: i32,
    pub log_frequency: u32,
    pub file: String,
    pub mode: Mode,
}

impl Default for Settings {
    /// tritonserver's defaults.
    fn default() -> Self {
        Settings {
            level: Level::default(),
            rate: 1000,
            count: -1,
            log_frequency: 0,
            file: String::new(),
            mode: Mode::Triton,
        }
    }
}

/// The fields a scope sets itself; `None` falls back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    pub level: Option<Level>,
    pub rate: Option<u32>,
    pub count: Option<i32>,
    pub log_frequency: Option<u32>,
}

impl Overrides {
    pub fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }

    /// `fallback` with this scope's fields over it.
    pub fn over(&self, fallback: &Settings) -> Settings {
        Settings {
            level: self.level.unwrap_or(fallback.level),
            rate: self.rate.unwrap_or(fallback.rate),
            count: self.count.unwrap_or(fallback.count),
            log_frequency: self.log_frequency.unwrap_or(fallback.log_frequency),
            file: fallback.file.clone(),
            mode: fallback.mode,
        }
    }
}

/// A change the trace extension asks for: per field, leave it (`None`), clear it (`Some(None)`) or set it.
#[derive(Clone, Debug, Default)]
pub struct Change {
    pub level: Option<Option<Level>>,
    pub rate: Option<Option<u32>>,
    pub count: Option<Option<i32>>,
    pub log_frequency: Option<Option<u32>>,
}

impl Change {
    pub fn apply(&self, overrides: &mut Overrides) {
        if let Some(level) = self.level {
            overrides.level = level;
        }
        if let Some(rate) = self.rate {
            overrides.rate = rate;
        }
        if let Some(count) = self.count {
            overrides.count = count;
        }
        if let Some(log_frequency) = self.log_frequency {
            overrides.log_frequency = log_frequency;
        }
    }
}

/// The sampling rate from its text: `0..=u32::MAX` (0 traces nothing).
pub fn parse_rate(name: &str, text: &str) -> Result<u32, String> {
    parse_number(name, text, 0, u32::MAX)
}

/// The count of traces left from its text: `-1` (no limit) `..=i32::MAX`.
pub fn parse_count(name: &str, text: &str) -> Result<i32, String> {
    parse_number(name, text, -1, i32::MAX)
}

/// The log frequency from its text: `0..=u32::MAX` (0 writes the file at shutdown).
pub fn parse_log_frequency(name: &str, text: &str) -> Result<u32, String> {
    parse_number(name, text, 0, u32::MAX)
}

/// Parses a numeric setting from its text, in `[min, max]`, with Triton's messages.
pub fn parse_number<T>(name: &str, text: &str, min: T, max: T) -> Result<T, String>
where
    T: Copy + std::fmt::Display + Into<i128> + TryFrom<i128>,
{
    let value: i128 = text.trim().parse().map_err(|_| format!("Unable to parse '{name}', got: {text}"))?;
    if value < min.into() || value > max.into() {
        return Err(format!("Unable to parse '{name}', value is out of range [ {min}, {max} ], got: {text}"));
    }
    T::try_from(value).map_err(|_| format!("Unable to parse '{name}', got: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_numbers_read_as_triton_reads_them() {
        assert_eq!(Level::from_names(["TIMESTAMPS", "TENSORS"]).unwrap().names(), ["TIMESTAMPS", "TENSORS"]);
        assert_eq!(Level::from_names(["OFF"]).unwrap().names(), ["OFF"]);
        assert!(Level::from_names(["OFF", "TENSORS"]).unwrap_err().contains("only one trace level 'OFF'"));
        assert_eq!(parse_rate("trace_rate", "5"), Ok(5));
        assert_eq!(parse_rate("trace_rate", "x").unwrap_err(), "Unable to parse 'trace_rate', got: x");
        assert!(parse_rate("trace_rate", "-1").unwrap_err().contains("out of range [ 0,"));
        assert_eq!(parse_count("trace_count", "-1"), Ok(-1));
        assert!(parse_count("trace_count", "-2").unwrap_err().contains("out of range [ -1,"));
        assert!(parse_log_frequency("log_frequency", "4294967296").unwrap_err().contains("4294967295 ]"));
    }

    #[test]
    fn a_model_falls_back_field_by_field() {
        let startup = Settings { file: "t.json".into(), ..Settings::default() };
        let global = Overrides { rate: Some(1), ..Overrides::default() }.over(&startup);
        let model = Overrides { count: Some(3), ..Overrides::default() }.over(&global);
        assert_eq!((model.rate, model.count, model.file.as_str()), (1, 3, "t.json"));
    }
}
