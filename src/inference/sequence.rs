//! A request's place in a sequence, as Triton's sequence extension carries it: the `sequence_id`,
//! `sequence_start` and `sequence_end` request parameters (HTTP `parameters`, gRPC request parameters). The
//! correlation id is an unsigned integer or a string; 0 and "" mean "no sequence". The messages are Triton's,
//! because clients and scripts match them.

use std::fmt;

use super::{InferenceRequest, Parameter};
use crate::error::{Error, Result};

/// Triton refuses longer string correlation ids.
const MAX_STRING_ID: usize = 128;

/// A sequence's correlation id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CorrelationId {
    Unsigned(u64),
    String(String),
}

impl CorrelationId {
    /// Whether the id names a sequence (Triton's "non-zero or non-empty").
    pub fn in_sequence(&self) -> bool {
        match self {
            CorrelationId::Unsigned(n) => *n != 0,
            CorrelationId::String(s) => !s.is_empty(),
        }
    }
}

impl fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorrelationId::Unsigned(n) => write!(f, "{n}"),
            CorrelationId::String(s) => f.write_str(s),
        }
    }
}

/// What a request says about its sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceFlags {
    pub id: CorrelationId,
    pub start: bool,
    pub end: bool,
}

impl InferenceRequest {
    /// Reads the sequence parameters, with Triton's messages for values of the wrong type. A request without
    /// `sequence_id` has the id 0 (no sequence).
    pub fn sequence_flags(&self) -> Result<SequenceFlags> {
        let mut flags = SequenceFlags { id: CorrelationId::Unsigned(0), start: false, end: false };
        for (key, value) in &self.parameters {
            match (key.as_str(), value) {
                // Frontends keep the 64 bits of an unsigned id in the signed parameter (as Triton's gRPC
                // frontend does with int64_param): they read back unchanged.
                ("sequence_id", Parameter::Int(n)) => flags.id = CorrelationId::Unsigned(*n as u64),
                ("sequence_id", Parameter::String(s)) if s.len() > MAX_STRING_ID => {
                    return Err(Error::invalid("string correlation ID cannot be longer than 128 characters"))
                }
                ("sequence_id", Parameter::String(s)) => flags.id = CorrelationId::String(s.clone()),
                ("sequence_id", _) => {
                    return Err(Error::invalid(
                        "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
                    ))
                }
                ("sequence_start", Parameter::Bool(b)) => flags.start = *b,
                ("sequence_end", Parameter::Bool(b)) => flags.end = *b,
                ("sequence_start" | "sequence_end", _) => {
                    return Err(Error::invalid(format!(
                        "invalid value type for '{key}' parameter, expected bool_param."
                    )))
                }
                _ => {}
            }
        }
        Ok(flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(parameters: Vec<(&str, Parameter)>) -> InferenceRequest {
        InferenceRequest {
            parameters: parameters.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            ..InferenceRequest::default()
        }
    }

    #[test]
    fn reads_ids_of_both_kinds_and_the_flags() {
        let flags = request(vec![("sequence_id", Parameter::Int(-1)), ("sequence_start", Parameter::Bool(true))])
            .sequence_flags()
            .unwrap();
        assert_eq!(flags, SequenceFlags { id: CorrelationId::Unsigned(u64::MAX), start: true, end: false });
        let flags = request(vec![("sequence_id", Parameter::String("abc".into()))]).sequence_flags().unwrap();
        assert_eq!(flags.id, CorrelationId::String("abc".into()));
        assert!(!request(vec![]).sequence_flags().unwrap().id.in_sequence());
    }

    #[test]
    fn refuses_values_of_the_wrong_type() {
        let wrong = request(vec![("sequence_end", Parameter::Int(1))]).sequence_flags().unwrap_err();
        assert!(wrong.to_string().contains("'sequence_end' parameter, expected bool_param"), "{wrong}");
        let wrong = request(vec![("sequence_id", Parameter::Double(1.5))]).sequence_flags().unwrap_err();
        assert!(wrong.to_string().contains("expected int64_param or string_param"), "{wrong}");
        let long = request(vec![("sequence_id", Parameter::String("x".repeat(129)))]).sequence_flags().unwrap_err();
        assert!(long.to_string().contains("cannot be longer than 128"), "{long}");
    }
}
