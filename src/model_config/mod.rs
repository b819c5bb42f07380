//! Model configurations: `config.pbtxt` files in protobuf text format, parsed against our
//! `model_config.proto` by prost-reflect, checked, normalised the way Triton normalises them, and rendered
//! back as Triton-style JSON for `/config`. Every error names the file, the line where it can be found, and
//! what is wrong, because that message is all a user sees when their model fails to load.

pub mod ensemble;
mod json;
pub mod sequence;
mod text;
mod validate;

use std::path::Path;

use crate::error::LoadResult;
use crate::model_files;

pub use crate::proto::inference::ModelConfig;
pub use json::{parse_json, to_json};
pub use text::parse_text;
pub use validate::{normalise, validate};

/// What fills in the parts of a config that it leaves out, from the model itself (its backend's answer).
pub type Completer<'a> = &'a dyn Fn(&mut ModelConfig) -> LoadResult<()>;

/// Where a model's configuration comes from.
pub enum ConfigSource<'a> {
    /// `config.pbtxt`, or `configs/<name>.pbtxt` where `--model-config-name` names one that exists.
    File { config_name: Option<&'a str> },
    /// A JSON `ModelConfig` given with a load request, in place of the file.
    Json(&'a str),
}

/// Reads, completes (when `complete` is given, e.g. from the model file itself), checks and normalises the
/// configuration of the model in `model_dir`. Without a config file, `complete` must supply everything.
pub fn load(
    model_dir: &Path,
    model_name: &str,
    source: &ConfigSource<'_>,
    complete: Option<Completer<'_>>,
) -> LoadResult<ModelConfig> {
    let (config, text, origin) = match source {
        ConfigSource::File { config_name } => {
            let path = config_path(model_dir, *config_name);
            let origin = path.display().to_string();
            match model_files::read_regular(&path, model_files::CONFIG_LIMIT) {
                Ok(bytes) => {
                    let text = String::from_utf8(bytes).map_err(|e| format!("{origin}: is not UTF-8 text: {e}"))?;
                    (parse_text(&text, &origin)?, text, origin)
                }
                Err(e) if e.is_not_found() && complete.is_some() => (ModelConfig::default(), String::new(), origin),
                Err(e) => return Err(e.to_string().into()),
            }
        }
        ConfigSource::Json(text) => {
            let origin = "the load request's 'config' parameter".to_string();
            (parse_json(text, &origin)?, String::new(), origin)
        }
    };
    check(config, model_name, &text, &origin, complete)
}

/// Completes (when `complete` is given), checks and normalises a parsed config; `text` is its source, for
/// the line numbers in messages.
pub fn check(
    mut config: ModelConfig,
    model_name: &str,
    text: &str,
    origin: &str,
    complete: Option<Completer<'_>>,
) -> LoadResult<ModelConfig> {
    validate::check_model_file_name(&config, text, origin)?;
    if let Some(complete) = complete {
        if config.name.is_empty() {
            config.name = model_name.to_string(); // the completer sees the config as Triton passes it, named
        }
        complete(&mut config).map_err(|e| format!("{origin}: auto-completing the config: {e}"))?;
    }
    validate(&config, model_name, text, origin)?;
    normalise(&mut config, model_name);
    Ok(config)
}

/// Config parameter `key` (`parameters { key: "k" value { string_value: "v" } }`) read as a `T`: `None` when
/// absent, an error naming the key and the value when the value does not read as `kind` (e.g. "a whole
/// number").
pub fn parameter<T: std::str::FromStr>(config: &ModelConfig, key: &str, kind: &str) -> LoadResult<Option<T>> {
    match config.parameters.get(key) {
        None => Ok(None),
        Some(p) => p
            .string_value
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("parameter '{key}' must be {kind}, got '{}'", p.string_value).into()),
    }
}

/// Dims as Triton prints them: `[-1,16]`.
pub fn dims_text(dims: &[i64]) -> String {
    format!("[{}]", dims.iter().map(i64::to_string).collect::<Vec<_>>().join(","))
}

/// The name of a version's model file: `default_model_filename`, else the backend's `default`.
pub fn model_file_name<'c>(config: &'c ModelConfig, default: &'c str) -> &'c str {
    match config.default_model_filename.as_str() {
        "" => default,
        name => name,
    }
}

/// Whether the model is decoupled (`model_transaction_policy { decoupled: true }`): it answers a request
/// with any number of responses, over a stream.
pub fn is_decoupled(config: &ModelConfig) -> bool {
    config.model_transaction_policy.as_ref().is_some_and(|policy| policy.decoupled)
}

/// The config file of the model in `model_dir`: `configs/<config_name>.pbtxt` if named and present (as
/// Triton's `--model-config-name`), else `config.pbtxt`.
pub fn config_path(model_dir: &Path, config_name: Option<&str>) -> std::path::PathBuf {
    config_name
        .map(|name| model_dir.join("configs").join(format!("{name}.pbtxt")))
        .filter(|custom| custom.is_file())
        .unwrap_or_else(|| model_dir.join("config.pbtxt"))
}

fn line_of(text: &str, needle: &str, skip: usize) -> Option<usize> {
    let (offset, _) = text.match_indices(needle).nth(skip)?;
    Some(text[..offset].matches('\n').count() + 1)
}
