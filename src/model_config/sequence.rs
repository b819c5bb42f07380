//! `sequence_batching`, read and checked: the control inputs the server fills in for each request
//! (START, END, READY as a false/true pair of int32, fp32 or bool values; CORRID as a data type), the
//! implicit states it keeps between a sequence's requests, and Triton's defaults. Errors use Triton's
//! messages (core `model_config_utils.cc`, `sequence_batch_scheduler.cc`).

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;

use super::ModelConfig;
use crate::error::LoadResult;
use crate::model_files;
use crate::proto::inference::model_sequence_batching::initial_state::StateData;
use crate::proto::inference::model_sequence_batching::{
    control::Kind, Control, InitialState as ProtoInitialState, State, StrategyChoice,
};
use crate::proto::inference::{DataType as ConfigDataType, ModelSequenceBatching};
use crate::tensor::DataType;

/// Triton's default `max_sequence_idle_microseconds`.
const DEFAULT_IDLE: Duration = Duration::from_secs(1);

/// Which signal a control input carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlKind {
    Start,
    End,
    Ready,
    CorrelationId,
}

/// The values a control input takes: its (false, true) pair, or the correlation id as `DataType`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ControlValues {
    Int32(i32, i32),
    Fp32(f32, f32),
    Bool(bool, bool),
    CorrelationId(DataType),
}

/// One control input the server adds to each request of a sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct ControlInput {
    pub name: String,
    pub kind: ControlKind,
    pub values: ControlValues,
}

/// One implicit state: fed to the model as input `input_name`, read back from its output `output_name`.
#[derive(Clone, Debug, PartialEq)]
pub struct StateSpec {
    pub input_name: String,
    pub output_name: String,
    pub datatype: DataType,
    /// What the state holds at a sequence's START.
    pub initial: InitialState,
}

/// A state's value at a sequence's START: zeros of its dims (the default, or `zero_data`), or the bytes of a
/// file in the model directory's `initial_state/` (`data_file`, read at load by `read_initial_files`).
#[derive(Clone, Debug, PartialEq)]
pub enum InitialState {
    Zeros { dims: Vec<i64> },
    File { dims: Vec<i64>, file: String },
    Data { dims: Vec<i64>, data: Bytes },
}

impl InitialState {
    /// The state's dims without the batch dimension.
    pub fn dims(&self) -> &[i64] {
        match self {
            InitialState::Zeros { dims } | InitialState::File { dims, .. } | InitialState::Data { dims, .. } => dims,
        }
    }
}

/// Triton reads `data_file`s from this directory of the model directory.
const INITIAL_STATE_DIR: &str = "initial_state";

impl SequenceSettings {
    /// Reads each `data_file` initial state from `model_dir/initial_state/` (Triton's checks: a file of
    /// fixed-size elements must hold at least the state's bytes; its first bytes are used). Without a model
    /// directory (a version served from code), a `data_file` is refused.
    pub fn read_initial_files(&mut self, model_dir: Option<&Path>) -> LoadResult<()> {
        for state in &mut self.states {
            let InitialState::File { dims, file } = &state.initial else { continue };
            let dir = model_dir.ok_or("initial_state data_file needs a model directory")?;
            model_files::check_file_name(file, "initial_state data_file")?;
            let bytes = model_files::read_regular(&dir.join(INITIAL_STATE_DIR).join(file), model_files::CONFIG_LIMIT)
                .map_err(|e| format!("initial_state of '{}': {e}", state.input_name))?;
            let data = match state.datatype.element_size() {
                None => Bytes::from(bytes),
                Some(size) => {
                    let wanted = dims.iter().product::<i64>() as usize * size;
                    if bytes.len() < wanted {
                        return Err(format!(
                            "initial_state setting expects {wanted} bytes, but the data provided from {file}only has \
                             {} bytes.",
                            bytes.len()
                        )
                        .into());
                    }
                    Bytes::copy_from_slice(&bytes[..wanted])
                }
            };
            state.initial = InitialState::Data { dims: dims.clone(), data };
        }
        Ok(())
    }
}

/// The sequence batcher's strategy.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    /// Each sequence keeps one batch slot of one instance; a batch is whatever the slots have ready, once
    /// at least `min_utilization` of the slots are (Triton's `minimum_slot_utilization`; 0: any) or the
    /// oldest ready request has waited `max_delay`.
    Direct { max_delay: Duration, min_utilization: f32 },
    /// Up to `candidates` sequences per instance; batches form from their oldest requests, dynamic-batcher
    /// style.
    Oldest { candidates: usize, preferred: Vec<u64>, max_delay: Duration },
}

/// Everything the sequence batcher needs from the config.
#[derive(Clone, Debug, PartialEq)]
pub struct SequenceSettings {
    pub strategy: Strategy,
    pub max_batch_size: u64,
    /// A decoupled model's requests run one per execution: each has its own response sender.
    pub decoupled: bool,
    pub idle: Duration,
    pub controls: Vec<ControlInput>,
    pub states: Vec<StateSpec>,
}

/// The settings of a config with `sequence_batching`, checked; `None` without it.
pub fn settings(config: &ModelConfig) -> LoadResult<Option<SequenceSettings>> {
    let Some(batching) = config.sequence_batching() else { return Ok(None) };
    let name = &config.name;
    let controls = [Kind::ControlSequenceStart, Kind::ControlSequenceEnd, Kind::ControlSequenceReady]
        .into_iter()
        .map(|kind| boolean_control(batching, name, kind))
        .chain(std::iter::once(correlation_id_control(batching, name)))
        .filter_map(Result::transpose)
        .collect::<LoadResult<Vec<_>>>()?;
    let max_batch_size = config.max_batch_size.max(0) as u64;
    let strategy = match &batching.strategy_choice {
        Some(StrategyChoice::Oldest(oldest)) => {
            for &size in &oldest.preferred_batch_size {
                if size <= 0 {
                    return Err(format!("sequence batching preferred batch size must be positive for {name}").into());
                }
                if size as u64 > max_batch_size {
                    return Err(
                        format!("sequence batching preferred batch size must be <= max batch size for {name}").into()
                    );
                }
            }
            let candidates = match oldest.max_candidate_sequences {
                n if n > 0 => n as usize,
                _ => max_batch_size.max(1) as usize,
            };
            let mut preferred: Vec<u64> = oldest.preferred_batch_size.iter().map(|&p| p as u64).collect();
            if preferred.is_empty() && max_batch_size > 0 {
                preferred.push(max_batch_size);
            }
            Strategy::Oldest {
                candidates,
                preferred,
                max_delay: Duration::from_micros(oldest.max_queue_delay_microseconds),
            }
        }
        Some(StrategyChoice::Direct(direct)) => Strategy::Direct {
            max_delay: Duration::from_micros(direct.max_queue_delay_microseconds),
            min_utilization: direct.minimum_slot_utilization,
        },
        None => Strategy::Direct { max_delay: Duration::ZERO, min_utilization: 0.0 },
    };
    if config.response_cache.as_ref().is_some_and(|c| c.enable) {
        return Err(format!(
            "Response Cache does not currently support model {name} with sequence batching scheduler. Please \
             disable the response cache."
        )
        .into());
    }
    let states = states(batching, config)?;
    let idle = match batching.max_sequence_idle_microseconds {
        0 => DEFAULT_IDLE,
        us => Duration::from_micros(us),
    };
    let decoupled = super::is_decoupled(config);
    Ok(Some(SequenceSettings { strategy, max_batch_size, decoupled, idle, controls, states }))
}

impl ModelConfig {
    /// The `sequence_batching` block, when the config chooses it.
    pub fn sequence_batching(&self) -> Option<&ModelSequenceBatching> {
        match &self.scheduling_choice {
            Some(crate::proto::inference::model_config::SchedulingChoice::SequenceBatching(s)) => Some(s),
            _ => None,
        }
    }
}

fn kind_name(kind: Kind) -> &'static str {
    kind.as_str_name()
}

/// The control inputs of `kind` in `batching`, with Triton's checks: named, one tensor per kind, one per
/// name.
fn controls_of(batching: &ModelSequenceBatching, model: &str, kind: Kind) -> LoadResult<Option<(String, Control)>> {
    let mut seen_names = HashSet::new();
    let mut found = None;
    for input in &batching.control_input {
        if input.name.is_empty() {
            return Err(format!("sequence batching control tensor must have a name for {model}").into());
        }
        if !seen_names.insert(input.name.as_str()) {
            return Err(format!(
                "sequence batching control tensor '{}' is specified for multiple control kinds for {model}",
                input.name
            )
            .into());
        }
        for control in input.control.iter().filter(|c| c.kind == kind as i32) {
            if found.is_some() {
                return Err(
                    format!("sequence batching specifies multiple {} tensors for {model}", kind_name(kind)).into()
                );
            }
            found = Some((input.name.clone(), control.clone()));
        }
    }
    Ok(found)
}

fn boolean_control(batching: &ModelSequenceBatching, model: &str, kind: Kind) -> LoadResult<Option<ControlInput>> {
    let Some((name, c)) = controls_of(batching, model, kind)? else { return Ok(None) };
    let kind_text = kind_name(kind);
    let given = [c.int32_false_true.len(), c.fp32_false_true.len(), c.bool_false_true.len()];
    match given.iter().filter(|&&n| n > 0).count() {
        0 => {
            return Err(format!(
                "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' \
                 for {kind_text} for {model}"
            )
            .into())
        }
        1 => {}
        _ => {
            return Err(format!(
                "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and \
                 'bool_false_true' for {kind_text} for {model}"
            )
            .into())
        }
    }
    let exactly_two = |field: &str, n: usize| -> LoadResult<()> {
        match n {
            2 => Ok(()),
            _ => Err(format!(
                "sequence batching control '{field}' must have exactly 2 entries for {kind_text} for {model}"
            )
            .into()),
        }
    };
    let values = if !c.int32_false_true.is_empty() {
        exactly_two("int32_false_true", c.int32_false_true.len())?;
        ControlValues::Int32(c.int32_false_true[0], c.int32_false_true[1])
    } else if !c.fp32_false_true.is_empty() {
        exactly_two("fp32_false_true", c.fp32_false_true.len())?;
        ControlValues::Fp32(c.fp32_false_true[0], c.fp32_false_true[1])
    } else {
        exactly_two("bool_false_true", c.bool_false_true.len())?;
        ControlValues::Bool(c.bool_false_true[0], c.bool_false_true[1])
    };
    let kind = match kind {
        Kind::ControlSequenceStart => ControlKind::Start,
        Kind::ControlSequenceEnd => ControlKind::End,
        _ => ControlKind::Ready,
    };
    Ok(Some(ControlInput { name, kind, values }))
}

fn correlation_id_control(batching: &ModelSequenceBatching, model: &str) -> LoadResult<Option<ControlInput>> {
    let kind = Kind::ControlSequenceCorrid;
    let Some((name, c)) = controls_of(batching, model, kind)? else { return Ok(None) };
    if !(c.int32_false_true.is_empty() && c.fp32_false_true.is_empty() && c.bool_false_true.is_empty()) {
        return Err(format!(
            "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' \
             for {} for {model}",
            kind_name(kind)
        )
        .into());
    }
    let allowed = [
        ConfigDataType::TypeUint64,
        ConfigDataType::TypeInt64,
        ConfigDataType::TypeUint32,
        ConfigDataType::TypeInt32,
        ConfigDataType::TypeString,
    ];
    let datatype = match allowed.iter().find(|t| **t as i32 == c.data_type) {
        Some(t) => DataType::from_config(*t as i32).expect("an allowed type is a tensor type"),
        None => {
            return Err(format!(
                "unexpected data type for control {} for {model}. Allowed data types are TYPE_UINT64, TYPE_INT64, \
                 TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
                kind_name(kind)
            )
            .into())
        }
    };
    Ok(Some(ControlInput { name, kind: ControlKind::CorrelationId, values: ControlValues::CorrelationId(datatype) }))
}

/// The implicit states, checked: a name each way, a tensor type, fixed dims (their zeros start a sequence),
/// no name used twice, and no name that is also a configured input or output.
fn states(batching: &ModelSequenceBatching, config: &ModelConfig) -> LoadResult<Vec<StateSpec>> {
    let mut seen = HashSet::new();
    batching
        .state
        .iter()
        .map(|state: &State| {
            let input = &state.input_name;
            if input.is_empty() || state.output_name.is_empty() {
                return Err("sequence batching state must have both 'input_name' and 'output_name'".into());
            }
            if !seen.insert(input.clone()) {
                return Err(format!("State input name '{input}' specified more than once.").into());
            }
            let clashes = config.input.iter().map(|i| &i.name).chain(config.output.iter().map(|o| &o.name));
            if let Some(name) = clashes.into_iter().find(|n| *n == input || **n == state.output_name) {
                return Err(format!("sequence batching state '{name}' is also a configured input or output").into());
            }
            let datatype = DataType::from_config(state.data_type)
                .ok_or_else(|| format!("sequence batching state '{input}' must have a tensor data_type"))?;
            let initial = match state.initial_state.as_slice() {
                [] if state.dims.iter().any(|&d| d < 0) => {
                    return Err(format!(
                        "sequence batching state '{input}' has variable dims {:?}: without an 'initial_state' the \
                         server starts each sequence with zeros of the state's dims, so they must be fixed",
                        state.dims
                    )
                    .into())
                }
                [] => InitialState::Zeros { dims: state.dims.clone() },
                [initial] => initial_state(state, initial)?,
                _ => return Err(format!("State input name '{input}' specified more than once.").into()),
            };
            Ok(StateSpec { input_name: input.clone(), output_name: state.output_name.clone(), datatype, initial })
        })
        .collect()
}

/// A state's `initial_state`, with Triton's checks and messages.
fn initial_state(state: &State, initial: &ProtoInitialState) -> LoadResult<InitialState> {
    let input = &state.input_name;
    if initial.data_type != state.data_type {
        return Err(format!(
            "The data type used for 'initial_state' field of state '{input}' does not match the state data type."
        )
        .into());
    }
    if initial.name.is_empty() {
        return Err(format!("Field 'name' must be set when using initial_state for state input '{input}'.").into());
    }
    if initial.dims.len() != state.dims.len() {
        return Err(format!(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state input \
             '{input}'. {} != {}",
            initial.dims.len(),
            state.dims.len()
        )
        .into());
    }
    for (&given, &declared) in initial.dims.iter().zip(&state.dims) {
        if given < 0 {
            return Err(
                format!("'initial_state' field for state input name '{input}' contains variable dimensions.").into()
            );
        }
        if declared >= 0 && given != declared {
            return Err(format!(
                "'initial_state' dim for input name '{input}' doesn't match 'state' dim description. {given} != {declared}"
            )
            .into());
        }
    }
    let dims = initial.dims.clone();
    match &initial.state_data {
        Some(StateData::ZeroData(_)) => Ok(InitialState::Zeros { dims }),
        Some(StateData::DataFile(file)) => Ok(InitialState::File { dims, file: file.clone() }),
        None => Err(format!("initial_state setting expects state'{input}' to have state_data set").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_text;
    use super::*;

    fn settings_of(body: &str) -> LoadResult<Option<SequenceSettings>> {
        let text = format!(
            "name: \"m\" max_batch_size: 4 input [{{ name: \"IN\" data_type: TYPE_INT32 dims: [1] }}] \
             output [{{ name: \"OUT\" data_type: TYPE_INT32 dims: [1] }}] sequence_batching {{ {body} }}"
        );
        settings(&parse_text(&text, "config.pbtxt").unwrap())
    }

    #[test]
    fn reads_controls_states_and_defaults() {
        let s = settings_of(
            "control_input [{ name: \"S\" control [{ kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1] }] }, \
             { name: \"C\" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING }] }] \
             state [{ input_name: \"h\" output_name: \"h_out\" data_type: TYPE_FP32 dims: [2, 3] }] \
             oldest { max_candidate_sequences: 6 }",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            s.controls[0],
            ControlInput { name: "S".into(), kind: ControlKind::Start, values: ControlValues::Fp32(0.0, 1.0) }
        );
        assert_eq!(s.controls[1].values, ControlValues::CorrelationId(DataType::Bytes));
        assert_eq!(s.states[0].initial, InitialState::Zeros { dims: vec![2, 3] });
        assert_eq!(s.idle, DEFAULT_IDLE);
        assert_eq!(s.strategy, Strategy::Oldest { candidates: 6, preferred: vec![4], max_delay: Duration::ZERO });
    }

    #[test]
    fn refuses_what_triton_refuses() {
        let cases = [
            ("control_input [{ name: \"S\" control [{ kind: CONTROL_SEQUENCE_START }] }]", "must specify either"),
            (
                "control_input [{ name: \"S\" control [{ kind: CONTROL_SEQUENCE_READY int32_false_true: [1] }] }]",
                "exactly 2 entries",
            ),
            (
                "control_input [{ name: \"S\" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }, \
                 { name: \"S\" control [{ kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1] }] }]",
                "specified for multiple control kinds",
            ),
            (
                "control_input [{ name: \"C\" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 }] }]",
                "Allowed data types",
            ),
            ("oldest { preferred_batch_size: [8] }", "must be <= max batch size"),
            (
                "state [{ input_name: \"IN\" output_name: \"x\" data_type: TYPE_INT32 dims: [1] }]",
                "also a configured input",
            ),
        ];
        for (body, expected) in cases {
            let error = settings_of(body).unwrap_err().to_string();
            assert!(error.contains(expected), "{body}: {error}");
        }
    }
}
