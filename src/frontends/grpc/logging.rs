//! The logging extension over gRPC: `LogSettings` with an empty map answers the settings; with entries it
//! changes the ones named and answers them all. Triton's codes: a log file is fixed at start-up
//! (UNIMPLEMENTED), a value of the wrong kind or an unknown format is INVALID_ARGUMENT.

use std::collections::HashMap;

use tonic::Status;

use crate::observability::logging::{LogFormat, LogSettings};
use crate::proto::inference::log_settings_request::setting_value::ParameterChoice as Choice;
use crate::proto::inference::log_settings_request::SettingValue;
use crate::proto::inference::log_settings_response::setting_value::ParameterChoice as Answer;
use crate::proto::inference::log_settings_response::SettingValue as AnswerValue;
use crate::proto::inference::LogSettingsResponse;
use crate::service::{LogChange, LOG_FILE_FIXED};

/// What `settings` asks to change, or the status refusing it.
pub fn log_change(settings: &HashMap<String, SettingValue>) -> Result<LogChange, Status> {
    if settings.contains_key("log_file") {
        return Err(Status::unimplemented(LOG_FILE_FIXED));
    }
    let choice = |key: &str| settings.get(key).map(|value| value.parameter_choice.as_ref());
    let boolean = |key: &str| match choice(key) {
        None => Ok(None),
        Some(Some(Choice::BoolParam(on))) => Ok(Some(*on)),
        Some(_) => Err(Status::invalid_argument(format!("expect boolean for '{key}'"))),
    };
    let verbose = match choice("log_verbose_level") {
        None => None,
        Some(Some(Choice::Uint32Param(level))) => Some(*level),
        Some(_) => return Err(Status::invalid_argument("expect int32 for 'log_verbose_level'")),
    };
    let format = match choice("log_format") {
        None => None,
        Some(Some(Choice::StringParam(name))) => Some(
            LogFormat::from_name(name)
                .ok_or_else(|| Status::invalid_argument(format!("invalid argument for log_format, got: {name}")))?,
        ),
        Some(_) => return Err(Status::invalid_argument("expect string for 'log_format'")),
    };
    Ok(LogChange {
        info: boolean("log_info")?,
        warning: boolean("log_warning")?,
        error: boolean("log_error")?,
        verbose,
        format,
    })
}

pub fn response(settings: LogSettings) -> LogSettingsResponse {
    let entry = |key: &str, answer: Answer| (key.to_string(), AnswerValue { parameter_choice: Some(answer) });
    let levels = settings.levels;
    LogSettingsResponse {
        settings: HashMap::from([
            entry("log_file", Answer::StringParam(settings.file)),
            entry("log_info", Answer::BoolParam(levels.info)),
            entry("log_warning", Answer::BoolParam(levels.warning)),
            entry("log_error", Answer::BoolParam(levels.error)),
            entry("log_verbose_level", Answer::Uint32Param(levels.verbose)),
            entry("log_format", Answer::StringParam(settings.format.name().to_string())),
        ]),
    }
}
