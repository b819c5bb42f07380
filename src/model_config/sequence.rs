//! `sequence_batching`, read and checked: the control inputs the server fills in for each request
//! (START, END, READY as a false/true pair of int32, fp32 or bool values; CORRID as a data type), the
//! implicit states it keeps between a sequence's requests, and Triton's defaults. Errors use Triton's
//! messages (core `model_config_utils.cc`, `sequence_batch_scheduler.cc`).

use std::collections::HashSet;
use std::time::Duration;

use super::ModelConfig;
use crate::error::LoadResult;
use crate::proto::inference::model_sequence_batching::{control::Kind, Control, State, StrategyChoice};
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
    /// Without the batch dimension; the state at a sequence's start is zeros of these dims.
    pub dims: Vec<i64>,
}

/// The sequence batcher's strategy.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    /// Each sequence keeps one batch slot of one instance; a batch is whatever the slots have ready.
    Direct,
    /// Up to `candidates` sequences per instance; batches form from their oldest requests, dynamic-batcher
    /// style.
    Oldest { candidates: usize, preferred: Vec<u64>, max_delay: Duration },
}

/// Everything the sequence batcher needs from the config.
#[derive(Clone, Debug, PartialEq)]
pub struct SequenceSettings {
    pub strategy: Strategy,
    pub max_batch_size: u64,
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
        _ => Strategy::Direct,
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
    Ok(Some(SequenceSettings { strategy, max_batch_size, idle, controls, states }))
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
            if state.dims.iter().any(|&d| d < 0) {
                return Err(format!(
                    "sequence batching state '{input}' has variable dims {:?}: the server starts each sequence \
                     with zeros of the state's dims, so they must be fixed",
                    state.dims
                )
                .into());
            }
            if let Some(initial) = state.initial_state.first() {
                return Err(format!(
                    "'initial_state' '{}' of state '{input}': only the default (zeros) is supported by this server",
                    initial.name
                )
                .into());
            }
            Ok(StateSpec {
                input_name: input.clone(),
                output_name: state.output_name.clone(),
                datatype,
                dims: state.dims.clone(),
            })
        })
        .collect()
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
        assert_eq!(s.states[0].dims, vec![2, 3]);
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
