//! Triton-style JSON for a model configuration: protobuf's JSON mapping with the original field names, every
//! field printed (defaults included), enums by name and 64-bit integers as numbers — the shape that
//! `tritonclient`'s `get_model_config` and Triton's tools expect from `/config`.

use super::ModelConfig;
use crate::proto::to_triton_json;

pub fn to_json(config: &ModelConfig) -> serde_json::Value {
    to_triton_json(config, "inference.ModelConfig")
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
}
