//! The model repository extension over gRPC: translates RepositoryIndex / RepositoryModelLoad /
//! RepositoryModelUnload messages to and from `repository::ModelControl`, with the same rules as HTTP
//! (files arrive as raw bytes here instead of base64).

use std::collections::HashMap;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::proto::inference::model_repository_parameter::ParameterChoice;
use crate::proto::inference::repository_index_response::ModelIndex;
use crate::proto::inference::{ModelRepositoryParameter, RepositoryIndexResponse};
use crate::service::{IndexEntry, LoadOverrides};

pub fn index_response(entries: Vec<IndexEntry>) -> RepositoryIndexResponse {
    let models = entries
        .into_iter()
        .map(|e| ModelIndex { name: e.name, version: e.version, state: e.state, reason: e.reason })
        .collect();
    RepositoryIndexResponse { models }
}

pub fn load_overrides(parameters: HashMap<String, ModelRepositoryParameter>) -> Result<LoadOverrides> {
    let mut overrides = LoadOverrides::default();
    for (key, value) in parameters {
        if key == "config" {
            match value.parameter_choice {
                Some(ParameterChoice::StringParam(config)) => overrides.config = Some(config),
                _ => return Err(Error::invalid("parameter 'config' must be a string_param")),
            }
        } else if let Some(path) = key.strip_prefix("file:") {
            match value.parameter_choice {
                Some(ParameterChoice::BytesParam(content)) => {
                    overrides.files.push((path.to_string(), Bytes::from(content)))
                }
                _ => return Err(Error::invalid(format!("parameter '{key}' must be a bytes_param"))),
            }
        }
    }
    Ok(overrides)
}

pub fn check_unload(parameters: &HashMap<String, ModelRepositoryParameter>) -> Result<()> {
    match parameters.get("unload_dependents").map(|p| &p.parameter_choice) {
        None | Some(Some(ParameterChoice::BoolParam(_))) => Ok(()),
        Some(_) => Err(Error::invalid("parameter 'unload_dependents' must be a bool_param")),
    }
}
