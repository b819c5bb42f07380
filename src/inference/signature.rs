//! A model's inputs and outputs as requests see them (batch dimension included), derived once from its
//! configuration, and the checks every request and every backend answer go through. Checking here, before a
//! request is queued, means a backend only ever sees well-formed requests and a client gets a precise 400.

use std::collections::HashSet;

use super::{InferenceRequest, Labels};
use crate::error::{Error, LoadResult, Result};
use crate::model_config::ModelConfig;
use crate::tensor::{DataType, Tensor};

#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: DataType,
    /// Dimensions without the batch dimension; -1 matches any size.
    pub dims: Vec<i64>,
    pub optional: bool,
}

impl TensorSpec {
    /// The shape clients see: with a leading -1 when the model batches.
    pub fn full_shape(&self, max_batch_size: i64) -> Vec<i64> {
        let batch = (max_batch_size > 0).then_some(-1);
        batch.into_iter().chain(self.dims.iter().copied()).collect()
    }
}

#[derive(Clone, Debug)]
pub struct Signature {
    pub model: String,
    pub max_batch_size: i64,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// The outputs' class labels, for the classification extension.
    pub labels: Labels,
}

impl Signature {
    /// Derives the signature of a validated config; a reshape's shape is what requests carry.
    pub fn from_config(config: &ModelConfig) -> LoadResult<Self> {
        let spec = |name: &str, data_type: i32, dims: &[i64], optional: bool| {
            let datatype =
                DataType::from_config(data_type).ok_or_else(|| format!("'{name}' has an invalid data type"))?;
            Ok::<_, String>(TensorSpec { name: name.to_string(), datatype, dims: dims.to_vec(), optional })
        };
        Ok(Signature {
            model: config.name.clone(),
            max_batch_size: i64::from(config.max_batch_size),
            inputs: config
                .input
                .iter()
                .map(|i| spec(&i.name, i.data_type, &i.dims, i.optional))
                .collect::<std::result::Result<_, _>>()?,
            outputs: config
                .output
                .iter()
                .map(|o| spec(&o.name, o.data_type, &o.dims, false))
                .collect::<std::result::Result<_, _>>()?,
            labels: Labels::default(),
        })
    }

    /// The same signature with the outputs' class labels.
    pub fn with_labels(self, labels: Labels) -> Self {
        Signature { labels, ..self }
    }

    /// Checks a request against the model: known and complete inputs of the right type, shape and size, a
    /// batch no larger than allowed, and known requested outputs.
    pub fn check_request(&self, request: &InferenceRequest) -> Result<()> {
        let mut seen = HashSet::new();
        let mut batch = None;
        for tensor in &request.inputs {
            if !seen.insert(tensor.name.as_str()) {
                return Err(Error::invalid(format!("input '{}' appears more than once in the request", tensor.name)));
            }
            let spec = self.inputs.iter().find(|s| s.name == tensor.name).ok_or_else(|| {
                Error::invalid(format!("unexpected inference input '{}' for model '{}'", tensor.name, self.model))
            })?;
            self.check_input(spec, tensor, &mut batch)?;
        }
        let missing: Vec<_> = self
            .inputs
            .iter()
            .filter(|s| !s.optional && !seen.contains(s.name.as_str()))
            .map(|s| s.name.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(Error::invalid(format!(
                "model '{}' expects input(s) {missing:?} which the request does not contain",
                self.model
            )));
        }
        let mut requested = HashSet::new();
        for name in &request.requested_outputs {
            if !requested.insert(name.as_str()) {
                return Err(Error::invalid(format!("output '{name}' already exists in request")));
            }
            if !self.outputs.iter().any(|s| &s.name == name) {
                return Err(Error::invalid(format!("unexpected inference output '{name}' for model '{}'", self.model)));
            }
        }
        Ok(())
    }

    /// The outputs a request asks for (`requested`), or every output in config order when it names none.
    pub fn output_names(&self, requested: &[String]) -> Vec<String> {
        self.wanted(requested).map(str::to_string).collect()
    }

    fn wanted<'a>(&'a self, requested: &'a [String]) -> impl Iterator<Item = &'a str> {
        let all = requested.is_empty().then(|| self.outputs.iter().map(|s| s.name.as_str()));
        all.into_iter().flatten().chain(requested.iter().map(String::as_str))
    }

    /// Checks what a backend answered and keeps the outputs the request asked for (`requested`), in the order asked (all
    /// outputs in config order if none were named). A backend that leaves out an output, or answers with a
    /// tensor whose bytes do not fit its own shape and type, fails the request with an internal error that
    /// says so. As in Triton, an output's shape and type are the backend's: the config's `dims` and
    /// `data_type` describe it, they do not bind it.
    pub fn select_outputs(&self, requested: &[String], mut produced: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let mut selected = Vec::with_capacity(if requested.is_empty() { self.outputs.len() } else { requested.len() });
        for name in self.wanted(requested) {
            let index = produced
                .iter()
                .position(|t| t.name == name)
                .ok_or_else(|| Error::internal(format!("model '{}' did not produce output '{name}'", self.model)))?;
            let tensor = produced.swap_remove(index);
            check_consistent(&tensor)
                .map_err(|e| Error::internal(format!("model '{}' produced an invalid output: {e}", self.model)))?;
            selected.push(tensor);
        }
        Ok(selected)
    }

    fn check_input(&self, spec: &TensorSpec, tensor: &Tensor, batch: &mut Option<i64>) -> Result<()> {
        if tensor.datatype != spec.datatype {
            return Err(Error::invalid(format!(
                "input '{}' has data type {}, but model '{}' expects {}",
                tensor.name, tensor.datatype, self.model, spec.datatype
            )));
        }
        let shape_error = || {
            Error::invalid(format!(
                "input '{}' has shape {:?}, but model '{}' expects {:?}",
                tensor.name,
                tensor.shape,
                self.model,
                spec.full_shape(self.max_batch_size)
            ))
        };
        if tensor.shape.iter().any(|&d| d < 0) {
            return Err(negative_dimension("input", tensor));
        }
        let dims = if self.max_batch_size > 0 {
            let (&size, rest) = tensor.shape.split_first().ok_or_else(shape_error)?;
            if size < 1 || size > self.max_batch_size {
                return Err(Error::invalid(format!(
                    "input '{}' has batch size {size}; model '{}' accepts 1 to {}",
                    tensor.name, self.model, self.max_batch_size
                )));
            }
            if *batch.get_or_insert(size) != size {
                return Err(Error::invalid(format!(
                    "input '{}' has batch size {size} but other inputs have {}",
                    tensor.name,
                    batch.unwrap_or_default()
                )));
            }
            rest
        } else {
            &tensor.shape[..]
        };
        let matches = dims.len() == spec.dims.len() && dims.iter().zip(&spec.dims).all(|(&d, &s)| s == -1 || d == s);
        if !matches {
            return Err(shape_error());
        }
        tensor.check_data_size()
    }
}

/// Checks that a tensor's bytes fit its own shape and data type.
fn check_consistent(tensor: &Tensor) -> Result<()> {
    if tensor.shape.iter().any(|&d| d < 0) {
        return Err(negative_dimension("output", tensor));
    }
    tensor.check_data_size()
}

fn negative_dimension(role: &str, tensor: &Tensor) -> Error {
    Error::invalid(format!("{role} '{}' has a negative dimension in shape {:?}", tensor.name, tensor.shape))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::model_config::parse_text;

    fn simple() -> Signature {
        let config = parse_text(
            "name: \"simple\" backend: \"wasm\" max_batch_size: 8
             input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ 16 ] } ]
             output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ 16 ] } ]",
            "c",
        )
        .unwrap();
        Signature::from_config(&config).unwrap()
    }

    fn request(shape: Vec<i64>, bytes: usize) -> InferenceRequest {
        InferenceRequest {
            model: "simple".into(),
            inputs: vec![Tensor {
                name: "INPUT0".into(),
                datatype: DataType::Int32,
                shape,
                data: Bytes::from(vec![0; bytes]),
            }],
            ..InferenceRequest::default()
        }
    }

    #[test]
    fn accepts_batches_within_the_limit() {
        simple().check_request(&request(vec![1, 16], 64)).unwrap();
        simple().check_request(&request(vec![8, 16], 512)).unwrap();
    }

    #[test]
    fn rejects_bad_batch_shape_and_size() {
        let sig = simple();
        assert!(sig.check_request(&request(vec![9, 16], 576)).unwrap_err().to_string().contains("batch size 9"));
        assert!(sig.check_request(&request(vec![1, 15], 60)).unwrap_err().to_string().contains("expects [-1, 16]"));
        assert!(sig.check_request(&request(vec![1, 16], 60)).unwrap_err().to_string().contains("needs 64 bytes"));
        assert!(sig.check_request(&request(vec![16], 64)).is_err());
    }

    #[test]
    fn rejects_an_output_requested_twice() {
        let twice = InferenceRequest {
            requested_outputs: vec!["OUTPUT0".into(), "OUTPUT0".into()],
            ..request(vec![1, 16], 64)
        };
        assert!(simple().check_request(&twice).unwrap_err().to_string().contains("'OUTPUT0' already exists"));
    }
}
