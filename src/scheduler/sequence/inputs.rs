//! The inputs the sequence batcher adds to a request before it runs: one tensor per control input (START,
//! END, READY, CORRID, in the config's form) and the sequence's implicit states, and the reading back of
//! the states a model produced. A batching model sees each as one row ([1, ...]); one that does not batch
//! sees it without the batch dimension, as Triton gives them.

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::inference::{CorrelationId, SequenceFlags};
use crate::model_config::sequence::{ControlInput, ControlKind, ControlValues, InitialState, StateSpec};
use crate::tensor::{encode_bytes_elements, DataType, Tensor};

/// Control inputs and states of one model.
pub struct Inputs {
    controls: Vec<ControlInput>,
    states: Vec<StateSpec>,
    batching: bool,
}

impl Inputs {
    pub fn new(controls: Vec<ControlInput>, states: Vec<StateSpec>, batching: bool) -> Self {
        Inputs { controls, states, batching }
    }

    /// The CORRID control's data type, if the model has one.
    pub fn correlation_id_type(&self) -> Option<DataType> {
        self.controls.iter().find_map(|c| match c.values {
            ControlValues::CorrelationId(datatype) => Some(datatype),
            _ => None,
        })
    }

    /// Refuses an id whose kind the CORRID control cannot carry (Triton's message; BYTES is its STRING).
    pub fn check_id_type(&self, id: &CorrelationId, request_id: &str, model: &str) -> Result<()> {
        let Some(expected) = self.correlation_id_type() else { return Ok(()) };
        let given = match id {
            CorrelationId::String(_) if expected != DataType::Bytes => DataType::Bytes,
            CorrelationId::Unsigned(_) if expected == DataType::Bytes => DataType::Uint64,
            _ => return Ok(()),
        };
        let name = &self.controls.iter().find(|c| c.kind == ControlKind::CorrelationId).expect("present").name;
        let prefix = if request_id.is_empty() { String::new() } else { format!("[request id: {request_id}] ") };
        Err(Error::invalid(format!(
            "{prefix}sequence batching control '{name}' data-type is '{given}', but model '{model}' expects '{expected}'"
        )))
    }

    /// Adds the control inputs for a request carrying `flags`, and the states it continues from: `states`
    /// (the outputs of the sequence's previous request, by output name), or zeros at a START or when there
    /// are none yet.
    pub fn add_to(&self, inputs: &mut Vec<Tensor>, flags: &SequenceFlags, states: &[Tensor]) {
        for control in &self.controls {
            let set = match control.kind {
                ControlKind::Start => flags.start,
                ControlKind::End => flags.end,
                ControlKind::Ready => true,
                ControlKind::CorrelationId => false,
            };
            let (datatype, data) = match control.values {
                ControlValues::Int32(f, t) => (DataType::Int32, Bytes::copy_from_slice(&pick(f, t, set).to_le_bytes())),
                ControlValues::Fp32(f, t) => (DataType::Fp32, Bytes::copy_from_slice(&pick(f, t, set).to_le_bytes())),
                ControlValues::Bool(f, t) => (DataType::Bool, Bytes::copy_from_slice(&[pick(f, t, set) as u8])),
                ControlValues::CorrelationId(datatype) => (datatype, correlation_id_bytes(&flags.id, datatype)),
            };
            inputs.push(Tensor { name: control.name.clone(), datatype, shape: self.shape(&[1]), data });
        }
        for spec in &self.states {
            let previous = states.iter().find(|s| s.name == spec.output_name).filter(|_| !flags.start);
            let tensor = match previous {
                Some(state) => Tensor { name: spec.input_name.clone(), ..state.clone() },
                None => self.initial(spec),
            };
            inputs.push(tensor);
        }
    }

    /// Takes the state outputs out of a request's outputs; the others stay. A model that did not produce
    /// every state fails the request.
    pub fn take_states(&self, outputs: &mut Vec<Tensor>) -> Result<Vec<Tensor>> {
        self.states
            .iter()
            .map(|spec| {
                let at = outputs.iter().position(|o| o.name == spec.output_name).ok_or_else(|| {
                    Error::internal(format!("the model did not produce its state output '{}'", spec.output_name))
                })?;
                Ok(outputs.remove(at))
            })
            .collect()
    }

    /// `dims` with a batch dimension of 1 in front when the model batches.
    fn shape(&self, dims: &[i64]) -> Vec<i64> {
        self.batching.then_some(1).into_iter().chain(dims.iter().copied()).collect()
    }

    /// The state at a sequence's START: its initial data, or zeros (empty strings for BYTES). A `data_file`
    /// was read at load (`SequenceSettings::read_initial_files`).
    fn initial(&self, spec: &StateSpec) -> Tensor {
        let dims = spec.initial.dims();
        let data = match &spec.initial {
            InitialState::Data { data, .. } => data.clone(),
            InitialState::Zeros { .. } | InitialState::File { .. } => {
                let count: i64 = dims.iter().product();
                match spec.datatype.element_size() {
                    Some(size) => Bytes::from(vec![0u8; count as usize * size]),
                    None => encode_bytes_elements((0..count).map(|_| &b""[..])),
                }
            }
        };
        Tensor { name: spec.input_name.clone(), datatype: spec.datatype, shape: self.shape(dims), data }
    }
}

fn pick<T: Copy>(when_false: T, when_true: T, set: bool) -> T {
    if set {
        when_true
    } else {
        when_false
    }
}

/// The id in the CORRID control's type: integers little-endian (truncated to 32 bits for the 32-bit types,
/// as Triton does), a string as one BYTES element. Ids of the wrong kind were refused at admission.
fn correlation_id_bytes(id: &CorrelationId, datatype: DataType) -> Bytes {
    match (id, datatype) {
        (CorrelationId::String(s), _) => encode_bytes_elements([s.as_bytes()]),
        (CorrelationId::Unsigned(n), DataType::Uint32 | DataType::Int32) => {
            Bytes::copy_from_slice(&(*n as u32).to_le_bytes())
        }
        (CorrelationId::Unsigned(n), _) => Bytes::copy_from_slice(&n.to_le_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        let control = |name: &str, kind, values| ControlInput { name: name.into(), kind, values };
        Inputs::new(
            vec![
                control("START", ControlKind::Start, ControlValues::Int32(0, 1)),
                control("READY", ControlKind::Ready, ControlValues::Fp32(0.0, 2.0)),
                control("CORRID", ControlKind::CorrelationId, ControlValues::CorrelationId(DataType::Uint64)),
            ],
            vec![StateSpec {
                input_name: "h".into(),
                output_name: "h_out".into(),
                datatype: DataType::Fp32,
                initial: InitialState::Zeros { dims: vec![2] },
            }],
            true,
        )
    }

    #[test]
    fn controls_and_states_are_added_per_request() {
        let flags = SequenceFlags { id: CorrelationId::Unsigned(7), start: true, end: false };
        let previous = vec![Tensor {
            name: "h_out".into(),
            datatype: DataType::Fp32,
            shape: vec![1, 2],
            data: Bytes::from(vec![1u8; 8]),
        }];
        let mut added = Vec::new();
        inputs().add_to(&mut added, &flags, &previous);
        assert_eq!(added[0].data, Bytes::from(1i32.to_le_bytes().to_vec()));
        assert_eq!(added[1].data, Bytes::from(2f32.to_le_bytes().to_vec()));
        assert_eq!(added[2].data, Bytes::from(7u64.to_le_bytes().to_vec()));
        assert_eq!(added[0].shape, vec![1, 1]);
        // A START begins from zeros whatever came before; the next request continues from the last state.
        assert_eq!(added[3].data, Bytes::from(vec![0u8; 8]));
        let mut next = Vec::new();
        inputs().add_to(&mut next, &SequenceFlags { start: false, ..flags }, &previous);
        assert_eq!((next[3].name.as_str(), &next[3].data), ("h", &previous[0].data));
    }

    #[test]
    fn an_id_of_the_wrong_kind_is_refused_with_tritons_message() {
        let error = inputs().check_id_type(&CorrelationId::String("a".into()), "r1", "m").unwrap_err();
        assert!(
            error.to_string().contains("[request id: r1] sequence batching control 'CORRID' data-type is 'BYTES', but model 'm' expects 'UINT64'"),
            "{error}"
        );
    }
}
