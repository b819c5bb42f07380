//! `simple_string_dyna_sequence`: Triton's `dyna_sequence` test backend as a Wasm plugin. Each sequence
//! has an INT32 accumulator, kept by this instance under the sequence's correlation id (the sequence
//! batcher keeps a sequence on one instance): a request with START sets it to its INPUT, later ones add
//! their INPUT, and the request with END adds the correlation id itself (truncated to 32 bits) and forgets
//! the sequence. OUTPUT is the accumulator after the request; a request whose READY is 0 changes nothing.
//!
//! The sequence batcher fills START, END, READY and CORRID in, one row per sequence of the batch. CORRID
//! is a string (the config's TYPE_STRING), read as an integer as Triton's backend does (a string that is
//! not one fails the batch with Triton's message), or an integer.

use std::collections::HashMap;

use tessera_plugin::{Args, DataType, Model, Request, Response, Tensor};

#[derive(Default)]
struct DynaSequence {
    accumulators: HashMap<u64, i32>,
}

/// The correlation id of each row: integers as they are, strings parsed as integers.
fn correlation_ids(corrid: &Tensor) -> Result<Vec<u64>, String> {
    if corrid.datatype != DataType::Bytes {
        return corrid.values::<u64>();
    }
    corrid
        .strings()?
        .iter()
        .map(|s| {
            let text = String::from_utf8_lossy(s);
            text.trim()
                .parse::<i64>()
                .map(|n| n as u64)
                .map_err(|_| "dyna sequence backend expects correlation ID to be decodable into an integer".to_string())
        })
        .collect()
}

impl Model for DynaSequence {
    fn initialize(_args: &Args) -> Result<Self, String> {
        Ok(DynaSequence::default())
    }

    fn execute(&mut self, request: Request) -> Result<Response, String> {
        let input = request.input("INPUT")?;
        let rows = input.shape.first().copied().unwrap_or(1).max(1) as usize;
        let flag = |name: &str| -> Result<Vec<bool>, String> {
            Ok(request.input(name)?.values::<i32>()?.into_iter().map(|v| v != 0).collect())
        };
        let (start, end, ready) = (flag("START")?, flag("END")?, flag("READY")?);
        let ids = correlation_ids(request.input("CORRID")?)?;
        let values = input.values::<i32>()?;
        let per_row = values.len() / rows;
        let mut seen = std::collections::HashSet::new();
        let mut output = Vec::with_capacity(values.len());
        for row in 0..rows {
            let id = ids[row];
            if !seen.insert(id) {
                return Err(
                    "Execute() called with batch containing multiple inferences requests for the same Correlation ID"
                        .into(),
                );
            }
            let row_values = &values[row * per_row..(row + 1) * per_row];
            if !ready[row] {
                output.extend(std::iter::repeat_n(0, per_row));
                continue;
            }
            let accumulator = self.accumulators.entry(id).or_insert(0);
            let mut sum: i32 = if start[row] { 0 } else { *accumulator };
            for value in row_values {
                sum = sum.wrapping_add(*value);
            }
            if end[row] {
                sum = sum.wrapping_add(id as i32);
            }
            *accumulator = sum;
            if end[row] {
                self.accumulators.remove(&id);
            }
            output.extend(std::iter::repeat_n(sum, per_row));
        }
        Ok(Response::new(vec![Tensor::new("OUTPUT", input.shape.clone(), &output)]))
    }
}

tessera_plugin::export!(DynaSequence);
