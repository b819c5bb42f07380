//! Checks a parsed configuration for the mistakes Triton refuses (and a few it lets through to fail later),
//! then fills in what Triton fills in: the name, the backend implied by a platform, the default version
//! policy and instance group. Validation reads nothing but the config and its text (for line numbers).

use std::collections::HashSet;

use super::{ensemble, line_of, sequence, ModelConfig};
use crate::error::LoadResult;
use crate::model_files;
use crate::proto::inference::{
    model_config::SchedulingChoice, model_instance_group::Kind, model_version_policy, DataType as ConfigDataType,
    ModelInput, ModelInstanceGroup, ModelOutput, ModelVersionPolicy,
};

/// Triton's platform names and the backend each one implies.
const PLATFORMS: [(&str, &str); 6] = [
    ("tensorflow_graphdef", "tensorflow"),
    ("tensorflow_savedmodel", "tensorflow"),
    ("tensorrt_plan", "tensorrt"),
    ("onnxruntime_onnx", "onnxruntime"),
    ("pytorch_libtorch", "pytorch"),
    ("ensemble", "ensemble"),
];

/// Backends a Triton model repository may name. Only some are served by Tessera (see `backends`); the
/// others are recognised so that their models fail with "not available here" rather than "unknown".
const KNOWN_BACKENDS: [&str; 13] = [
    "wasm",
    "identity",
    "onnxruntime",
    "pytorch",
    "tensorflow",
    "tensorrt",
    "python",
    "openvino",
    "fil",
    "dali",
    "ensemble",
    "vllm",
    "tensorrtllm",
];

/// Returns the first problem found, as "file:line: message" (or "file: message" when no line applies).
pub fn validate(config: &ModelConfig, model_name: &str, text: &str, origin: &str) -> LoadResult<()> {
    let at = |needle: &str, skip: usize| match line_of(text, needle, skip) {
        Some(line) => format!("{origin}:{line}"),
        None => origin.to_string(),
    };
    if !config.name.is_empty() && config.name != model_name {
        return Err(format!(
            "{}: model name '{}' does not match its directory '{model_name}'",
            at("name", 0),
            config.name
        )
        .into());
    }
    if config.max_batch_size < 0 {
        return Err(format!(
            "{}: max_batch_size must be 0 or more, got {}",
            at("max_batch_size", 0),
            config.max_batch_size
        )
        .into());
    }
    implied_backend(config)
        .map_err(|e| format!("{}: {e}", at(if config.platform.is_empty() { "backend" } else { "platform" }, 0)))?;
    if config.output.is_empty() {
        return Err(format!("{origin}: the model must declare at least one output").into());
    }
    let inputs = config.input.iter().map(TensorDecl::from);
    let outputs = config.output.iter().map(TensorDecl::from);
    check_tensors("input", inputs, &at)?;
    check_tensors("output", outputs, &at)?;
    check_priority_levels(config).map_err(|e| format!("{}: {e}", at("priority_levels", 0)))?;
    check_model_file_name(config, text, origin)?;
    check_instance_count(config).map_err(|e| format!("{}: {e}", at("instance_group", 0)))?;
    if config.sequence_batching().is_some() {
        let named = ModelConfig { name: model_name.to_string(), ..config.clone() };
        sequence::settings(&named).map_err(|e| format!("{}: {e}", at("sequence_batching", 0)))?;
        if super::is_decoupled(config) && !config.sequence_batching().is_some_and(|s| s.state.is_empty()) {
            return Err(format!(
                "{}: implicit state of a decoupled model is not supported by this server yet",
                at("sequence_batching", 0)
            )
            .into());
        }
    }
    if super::is_decoupled(config) && config.response_cache.as_ref().is_some_and(|c| c.enable) {
        return Err(format!(
            "{}: Response Cache does not currently support model {model_name} with 'decoupled' transaction \
             policy. Please disable the response cache.",
            at("response_cache", 0)
        )
        .into());
    }
    if ensemble::is_ensemble(config) {
        ensemble::validate(config).map_err(|e| format!("{}: {e}", at("ensemble_scheduling", 0)))?;
    }
    Ok(())
}

/// `default_model_filename` must be a file name, so that the model file stays inside its version directory.
/// Checked before a config is completed too, because completing it reads the model file.
pub fn check_model_file_name(config: &ModelConfig, text: &str, origin: &str) -> LoadResult<()> {
    if config.default_model_filename.is_empty() {
        return Ok(());
    }
    model_files::check_file_name(&config.default_model_filename, "default_model_filename").map_err(|e| {
        let at =
            line_of(text, "default_model_filename", 0).map_or(origin.to_string(), |line| format!("{origin}:{line}"));
        format!("{at}: {e}").into()
    })
}

/// The most instances one model version may have, over all its instance groups. Every instance holds a
/// store or a session, and an ONNX instance a thread, so a config must not be able to ask for thousands.
pub const MAX_INSTANCES: i64 = 128;

fn check_instance_count(config: &ModelConfig) -> LoadResult<()> {
    let total: i64 = config.instance_group.iter().map(|g| i64::from(g.count.max(1))).sum();
    if total > MAX_INSTANCES {
        return Err(format!(
            "instance_group asks for {total} instances; a model version may have at most {MAX_INSTANCES}"
        )
        .into());
    }
    Ok(())
}

/// With `priority_levels` set, the default level and every level given a queue policy must exist (Triton
/// refuses such a config too).
fn check_priority_levels(config: &ModelConfig) -> LoadResult<()> {
    let Some(SchedulingChoice::DynamicBatching(batching)) = &config.scheduling_choice else {
        return Ok(());
    };
    let levels = batching.priority_levels;
    if levels == 0 {
        return Ok(());
    }
    if !(1..=levels).contains(&batching.default_priority_level) {
        return Err(format!(
            "default_priority_level must be in range [1, {levels}] (priority_levels), got {}",
            batching.default_priority_level
        )
        .into());
    }
    match batching.priority_queue_policy.keys().find(|level| !(1..=levels).contains(*level)) {
        Some(level) => {
            Err(format!("priority_queue_policy names level {level}, outside [1, {levels}] (priority_levels)").into())
        }
        None => Ok(()),
    }
}

/// The backend that will run the model: `backend` if set, else the one its `platform` implies.
pub fn implied_backend(config: &ModelConfig) -> LoadResult<String> {
    let from_platform = match config.platform.as_str() {
        "" => None,
        platform => match PLATFORMS.iter().find(|(p, _)| *p == platform) {
            Some((_, backend)) => Some(*backend),
            None => {
                let known: Vec<_> = PLATFORMS.iter().map(|(p, _)| *p).collect();
                return Err(format!("unknown platform '{platform}' (known: {})", known.join(", ")).into());
            }
        },
    };
    match (config.backend.as_str(), from_platform) {
        ("", None) => Err("the config names neither a platform nor a backend".into()),
        ("", Some(backend)) => Ok(backend.to_string()),
        (backend, Some(implied)) if backend != implied => {
            Err(format!("platform '{}' implies backend '{implied}' but backend '{backend}' is given", config.platform)
                .into())
        }
        (backend, _) if !KNOWN_BACKENDS.contains(&backend) => {
            Err(format!("unknown backend '{backend}' (known: {})", KNOWN_BACKENDS.join(", ")).into())
        }
        (backend, _) => Ok(backend.to_string()),
    }
}

/// The parts of an input or output declaration that validation looks at.
struct TensorDecl<'a> {
    name: &'a str,
    data_type: i32,
    dims: &'a [i64],
    reshape: Option<&'a [i64]>,
}

impl<'a> From<&'a ModelInput> for TensorDecl<'a> {
    fn from(i: &'a ModelInput) -> Self {
        TensorDecl {
            name: &i.name,
            data_type: i.data_type,
            dims: &i.dims,
            reshape: i.reshape.as_ref().map(|r| &r.shape[..]),
        }
    }
}

impl<'a> From<&'a ModelOutput> for TensorDecl<'a> {
    fn from(o: &'a ModelOutput) -> Self {
        TensorDecl {
            name: &o.name,
            data_type: o.data_type,
            dims: &o.dims,
            reshape: o.reshape.as_ref().map(|r| &r.shape[..]),
        }
    }
}

fn check_tensors<'a>(
    kind: &str,
    tensors: impl Iterator<Item = TensorDecl<'a>>,
    at: &dyn Fn(&str, usize) -> String,
) -> LoadResult<()> {
    let mut seen = HashSet::new();
    for (index, tensor) in tensors.enumerate() {
        if tensor.name.is_empty() {
            return Err(format!("{}: {kind} {index} has no name", at(kind, index)).into());
        }
        let quoted = format!("\"{}\"", tensor.name);
        if !seen.insert(tensor.name) {
            return Err(format!("{}: {kind} '{}' is declared more than once", at(&quoted, 1), tensor.name).into());
        }
        let type_name = ConfigDataType::try_from(tensor.data_type).map(|t| t.as_str_name());
        if matches!(type_name, Err(_) | Ok("TYPE_INVALID")) {
            return Err(format!("{}: {kind} '{}' has no valid data_type", at(&quoted, 0), tensor.name).into());
        }
        if tensor.dims.is_empty() && tensor.reshape.is_none() {
            return Err(format!("{}: {kind} '{}' has no dims", at(&quoted, 0), tensor.name).into());
        }
        if let Some(bad) = tensor.dims.iter().find(|&&d| d < -1 || d == 0) {
            return Err(format!(
                "{}: {kind} '{}' has dimension {bad}; dims must be positive, or -1 for a variable size",
                at(&quoted, 0),
                tensor.name
            )
            .into());
        }
    }
    Ok(())
}

/// Fills in what Triton fills in for a valid config, so that `/config` shows what the server actually uses.
pub fn normalise(config: &mut ModelConfig, model_name: &str) {
    config.name = model_name.to_string();
    if let Ok(backend) = implied_backend(config) {
        config.backend = backend;
    }
    if config.version_policy.is_none() {
        config.version_policy = Some(ModelVersionPolicy {
            policy_choice: Some(model_version_policy::PolicyChoice::Latest(model_version_policy::Latest {
                num_versions: 1,
            })),
        });
    }
    // An ensemble has no instances of its own: its steps run on their models' instances.
    if config.instance_group.is_empty() && !ensemble::is_ensemble(config) {
        config.instance_group.push(ModelInstanceGroup::default());
    }
    for (index, group) in config.instance_group.iter_mut().enumerate() {
        if group.name.is_empty() {
            group.name = format!("{model_name}_{index}");
        }
        if group.count < 1 {
            group.count = 1;
        }
        // No accelerator is used by the backends served so far: "auto" resolves to CPU, as Triton does on a
        // machine without GPUs.
        if group.kind == Kind::Auto as i32 {
            group.kind = Kind::Cpu as i32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_text;
    use super::*;

    fn check(text: &str) -> LoadResult<()> {
        let config = parse_text(text, "m/config.pbtxt")?;
        validate(&config, "m", text, "m/config.pbtxt")
    }

    const OUT: &str = "output [ { name: \"O\" data_type: TYPE_FP32 dims: [ 1 ] } ]\n";

    #[test]
    fn accepts_a_minimal_config() {
        check(&format!("backend: \"wasm\"\n{OUT}")).unwrap();
    }

    #[test]
    fn rejects_duplicate_names_with_the_line_of_the_second() {
        let text = format!(
            "backend: \"wasm\"\ninput [\n {{ name: \"A\" data_type: TYPE_FP32 dims: [ 1 ] }},\n {{ name: \"A\" data_type: TYPE_FP32 dims: [ 1 ] }}\n]\n{OUT}"
        );
        let err = check(&text).unwrap_err();
        assert_eq!(err, "m/config.pbtxt:4: input 'A' is declared more than once");
    }

    #[test]
    fn rejects_bad_dims_negative_batch_missing_type_and_unknown_platform() {
        let bad_dims =
            format!("backend: \"wasm\"\ninput [ {{ name: \"A\" data_type: TYPE_FP32 dims: [ -2 ] }} ]\n{OUT}");
        assert!(check(&bad_dims).unwrap_err().contains("dimension -2"));
        let no_dims = format!("backend: \"wasm\"\ninput [ {{ name: \"A\" data_type: TYPE_FP32 }} ]\n{OUT}");
        assert!(check(&no_dims).unwrap_err().contains("has no dims"));
        let no_type = format!("backend: \"wasm\"\ninput [ {{ name: \"A\" dims: [ 1 ] }} ]\n{OUT}");
        assert!(check(&no_type).unwrap_err().contains("no valid data_type"));
        let negative = format!("backend: \"wasm\"\nmax_batch_size: -1\n{OUT}");
        assert_eq!(check(&negative).unwrap_err(), "m/config.pbtxt:2: max_batch_size must be 0 or more, got -1");
        let platform = format!("platform: \"caffe2_netdef\"\n{OUT}");
        assert!(check(&platform).unwrap_err().starts_with("m/config.pbtxt:1: unknown platform 'caffe2_netdef'"));
        let backend = format!("backend: \"nope\"\n{OUT}");
        assert!(check(&backend).unwrap_err().contains("unknown backend 'nope'"));
        assert!(check(OUT).unwrap_err().contains("neither a platform nor a backend"));
        assert!(check(&format!("name: \"other\"\nbackend: \"wasm\"\n{OUT}")).unwrap_err().contains("does not match"));
    }

    #[test]
    fn rejects_priority_levels_that_do_not_exist() {
        let batching =
            |body: &str| format!("backend: \"wasm\"\nmax_batch_size: 4\n{OUT}dynamic_batching {{\n {body} }}\n");
        check(&batching("priority_levels: 2 default_priority_level: 2")).unwrap();
        let default = check(&batching("priority_levels: 2 default_priority_level: 3")).unwrap_err();
        assert_eq!(
            default,
            "m/config.pbtxt:5: default_priority_level must be in range [1, 2] (priority_levels), got 3"
        );
        let policy = batching(
            "priority_levels: 2 default_priority_level: 1 priority_queue_policy { key: 5 value { max_queue_size: 1 } }",
        );
        assert!(check(&policy).unwrap_err().contains("names level 5, outside [1, 2]"));
    }

    #[test]
    fn rejects_model_file_paths_and_too_many_instances() {
        let file = |name: &str| check(&format!("backend: \"wasm\"\ndefault_model_filename: \"{name}\"\n{OUT}"));
        check(&format!("backend: \"wasm\"\ndefault_model_filename: \"plugin.wasm\"\n{OUT}")).unwrap();
        for bad in ["/etc/passwd", "../other/1/model.wasm", "sub/model.wasm", ".."] {
            assert!(file(bad).unwrap_err().starts_with("m/config.pbtxt:2: default_model_filename"), "{bad}");
        }
        let instances = |counts: &str| check(&format!("backend: \"wasm\"\n{OUT}instance_group [ {counts} ]\n"));
        instances("{ count: 64 }, { count: 64 }").unwrap();
        let error = instances("{ count: 100000 }").unwrap_err();
        assert_eq!(
            error,
            "m/config.pbtxt:3: instance_group asks for 100000 instances; a model version may have at most 128"
        );
        assert!(instances("{ count: 100 }, { count: 29 }").is_err());
    }

    #[test]
    fn normalise_fills_triton_defaults() {
        let mut config = parse_text(&format!("platform: \"onnxruntime_onnx\"\n{OUT}"), "c").unwrap();
        normalise(&mut config, "m");
        assert_eq!(config.name, "m");
        assert_eq!(config.backend, "onnxruntime");
        assert_eq!(config.instance_group[0].name, "m_0");
        assert_eq!(config.instance_group[0].count, 1);
        assert_eq!(config.instance_group[0].kind, Kind::Cpu as i32);
        assert!(config.version_policy.is_some());
    }
}
