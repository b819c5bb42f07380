//! Triton-style JSON for a model configuration: protobuf's JSON mapping with the original field names, every
//! field printed (defaults included), enums by name and 64-bit integers as numbers — the shape that
//! `tritonclient`'s `get_model_config` and Triton's tools expect from `/config`.

use prost::Message;
use prost_reflect::DynamicMessage;

use super::ModelConfig;
use crate::error::LoadResult;
use crate::proto::{model_config_descriptor, to_triton_json};

pub fn to_json(config: &ModelConfig) -> serde_json::Value {
    to_triton_json(config, "inference.ModelConfig")
}

/// Parses a JSON `ModelConfig` (protobuf's JSON mapping, original or camelCase names, as Triton accepts in a
/// load request); `origin` prefixes every error.
pub fn parse_json(text: &str, origin: &str) -> LoadResult<ModelConfig> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let dynamic = DynamicMessage::deserialize(model_config_descriptor(), &mut deserializer)
        .and_then(|message| deserializer.end().map(|_| message))
        .map_err(|e| format!("{origin}: not a valid JSON model configuration: {e}"))?;
    Ok(ModelConfig::decode(dynamic.encode_to_vec().as_slice())
        .map_err(|e| format!("{origin}: cannot convert parsed config: {e}"))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_original_names_defaults_and_enum_names() {
        let config = super::super::parse_text(
            "name: \"m\" backend: \"wasm\" max_batch_size: 8\ninput [ { name: \"A\" data_type: TYPE_INT32 dims: [ 16 ] } ]",
            "c",
        )
        .unwrap();
        let json = to_json(&config);
        assert_eq!(json["max_batch_size"], 8);
        assert_eq!(json["input"][0]["data_type"], "TYPE_INT32");
        assert_eq!(json["input"][0]["dims"][0], 16);
        assert_eq!(json["input"][0]["format"], "FORMAT_NONE");
        assert_eq!(json["platform"], "");
    }

    #[test]
    fn parses_what_it_renders_and_says_what_is_wrong() {
        let config = super::super::parse_text("name: \"m\" backend: \"wasm\" max_batch_size: 8", "c").unwrap();
        assert_eq!(parse_json(&to_json(&config).to_string(), "req").unwrap(), config);
        let camel = parse_json(r#"{"name": "m", "maxBatchSize": 4}"#, "req").unwrap();
        assert_eq!(camel.max_batch_size, 4);
        assert!(parse_json(r#"{"max_batch_size": "many"}"#, "req").unwrap_err().starts_with("req: not a valid JSON"));
    }
}
