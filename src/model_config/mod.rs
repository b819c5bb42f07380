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

/// Reads, parses, validates and normalises `<model_dir>/config.pbtxt`. The model's name defaults to the
/// directory name and must match it when given.
pub fn load(model_dir: &Path, model_name: &str) -> Result<ModelConfig, String> {
    let path = model_dir.join("config.pbtxt");
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{origin}: cannot read: {e}"))?;
    let mut config = parse_text(&text, &origin)?;
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
