//! The trace extension over gRPC: `TraceSetting` with an empty map answers the settings of `model_name`
//! (global when empty); entries set fields (one string each, a list for the level) or, with no value, clear
//! them. Triton's codes: a trace file is fixed at start-up (UNIMPLEMENTED), bad values INVALID_ARGUMENT.

use std::collections::HashMap;

use tonic::Status;

use crate::observability::trace::settings::{parse_count, parse_log_frequency, parse_rate};
use crate::observability::trace::{Change, Level, Mode, Settings};
use crate::proto::inference::trace_setting_request::SettingValue;
use crate::proto::inference::trace_setting_response::SettingValue as Answer;
use crate::proto::inference::TraceSettingResponse;
use crate::service::TRACE_FILE_FIXED;

/// What `settings` asks to change, or the status refusing it.
pub fn trace_change(settings: &HashMap<String, SettingValue>) -> Result<Change, Status> {
    if settings.contains_key("trace_file") {
        return Err(Status::unimplemented(TRACE_FILE_FIXED));
    }
    let level = match settings.get("trace_level").map(|setting| setting.value.as_slice()) {
        None => None,
        Some([]) => Some(None),
        Some(names) => {
            Some(Some(Level::from_names(names.iter().map(String::as_str)).map_err(Status::invalid_argument)?))
        }
    };
    Ok(Change {
        level,
        rate: number(settings, "trace_rate", parse_rate)?,
        count: number(settings, "trace_count", parse_count)?,
        log_frequency: number(settings, "log_frequency", parse_log_frequency)?,
    })
}

/// A numeric setting: absent (`None`), cleared by an empty list (`Some(None)`), or its one value, which
/// `parse` reads.
fn number<T>(
    settings: &HashMap<String, SettingValue>,
    key: &str,
    parse: fn(&str, &str) -> Result<T, String>,
) -> Result<Option<Option<T>>, Status> {
    match settings.get(key).map(|setting| setting.value.as_slice()) {
        None => Ok(None),
        Some([]) => Ok(Some(None)),
        Some([text]) => Ok(Some(Some(parse(key, text).map_err(Status::invalid_argument)?))),
        Some(_) => Err(Status::invalid_argument(format!("expect only 1 value for '{key}'"))),
    }
}

/// The settings as Triton lists them: the file's in the triton mode, the exporter's (`exporter`) in the
/// opentelemetry mode.
pub fn response(settings: Settings, exporter: Vec<(&'static str, String)>) -> TraceSettingResponse {
    let entry = |key: &str, values: Vec<String>| (key.to_string(), Answer { value: values });
    let mut answer = HashMap::from([
        entry("trace_level", settings.level.names().into_iter().map(String::from).collect()),
        entry("trace_rate", vec![settings.rate.to_string()]),
        entry("trace_count", vec![settings.count.to_string()]),
        entry("trace_mode", vec![settings.mode.name().into()]),
    ]);
    if settings.mode == Mode::Triton {
        answer.extend([
            entry("log_frequency", vec![settings.log_frequency.to_string()]),
            entry("trace_file", vec![settings.file]),
        ]);
    }
    for (key, value) in exporter {
        answer.entry(key.to_string()).or_insert_with(|| Answer { value: Vec::new() }).value.push(value);
    }
    TraceSettingResponse { settings: answer }
}
