//! Model configurations: `config.pbtxt` files in protobuf text format, parsed against our
//! `model_config.proto` by prost-reflect, checked, normalised the way Triton normalises them, and rendered
//! back as Triton-style JSON for `/config`. Every error names the file, the line where it can be found, and
//! what is wrong, because that message is all a user sees when their model fails to load.

mod json;
mod text;
mod validate;

use std::path::Path;

pub use crate::proto::inference::ModelConfig;
pub use json::to_json;
pub use text::parse_text;
pub use validate::{normalise, validate};

/// Reads and parses `<model_dir>/config.pbtxt`, lets `complete` fill in what it can (auto-completion from
/// the model itself; `None` turns it off), then validates and normalises. Without a config file the model
/// starts from an empty config, which only auto-completion can make valid. The model's name defaults to
/// the directory name and must match it when given.
pub fn load(
    model_dir: &Path,
    model_name: &str,
    complete: Option<&dyn Fn(&mut ModelConfig) -> Result<(), String>>,
) -> Result<ModelConfig, String> {
    let path = model_dir.join("config.pbtxt");
    let origin = path.display().to_string();
    let (mut config, text) = match std::fs::read_to_string(&path) {
        Ok(text) => (parse_text(&text, &origin)?, text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && complete.is_some() => (ModelConfig::default(), String::new()),
        Err(e) => return Err(format!("{origin}: cannot read: {e}")),
    };
    if let Some(complete) = complete {
        complete(&mut config).map_err(|e| format!("{origin}: auto-completing the config: {e}"))?;
    }
    validate(&config, model_name, &text, &origin)?;
    normalise(&mut config, model_name);
    Ok(config)
}

/// The 1-based line of the first occurrence of `needle` after the `skip`-th, for pointing error messages at
/// the right place in the source.
fn line_of(text: &str, needle: &str, skip: usize) -> Option<usize> {
    let (offset, _) = text.match_indices(needle).nth(skip)?;
    Some(text[..offset].matches('\n').count() + 1)
}
