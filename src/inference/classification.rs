//! Triton's classification extension: a requested output with a class count `k` comes back as the top `k`
//! of its values instead of the values themselves, one BYTES element per class, `"value:index"` or
//! `"value:index:label"` with the label from the output's `label_filename` (one label per line, read once
//! at load). A batching model's output is ranked row by row (shape `[batch, k]`), any other as one list
//! (`[k]`). Values print as Triton prints them (C++'s `std::to_string`: integers as they are, floating
//! point with six decimals), and the data types Triton ranks are the ones ranked here.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, LoadResult, Result};
use crate::model_config::ModelConfig;
use crate::tensor::{encode_bytes_elements, DataType, Tensor};

/// Triton refuses to rank more elements than this per row, to bound the work a request can ask for.
const MAX_RANKED_ELEMENTS: usize = 1_000_000;

/// The largest label file read, in bytes.
const LABEL_FILE_LIMIT: u64 = 64 << 20;

/// Each output's labels, by output name: the lines of its `label_filename`.
#[derive(Clone, Debug, Default)]
pub struct Labels(BTreeMap<String, Arc<Vec<String>>>);

impl Labels {
    /// Reads the label file of every output that names one, relative to the model directory (as Triton
    /// reads it). A label file that cannot be read fails the load.
    pub fn read(config: &ModelConfig, model_dir: &Path) -> LoadResult<Self> {
        let mut labels = BTreeMap::new();
        for output in config.output.iter().filter(|o| !o.label_filename.is_empty()) {
            let file = crate::model_files::resolve_inside(model_dir, Path::new(&output.label_filename))
                .map_err(|e| format!("label file of output '{}': {e}", output.name))?;
            let text = crate::model_files::read_regular(&file, LABEL_FILE_LIMIT)
                .map_err(|e| format!("label file of output '{}': {e}", output.name))?;
            let text = String::from_utf8_lossy(&text);
            labels.insert(output.name.clone(), Arc::new(text.lines().map(str::to_string).collect()));
        }
        Ok(Labels(labels))
    }

    fn of(&self, output: &str) -> &[String] {
        self.0.get(output).map_or(&[], |labels| labels.as_slice())
    }
}

/// Replaces each output named in `class_counts` by its top classes; `batching`: whether the model's first
/// dimension is the batch.
pub fn classify(
    outputs: Vec<Tensor>,
    class_counts: &[(String, usize)],
    labels: &Labels,
    batching: bool,
) -> Result<Vec<Tensor>> {
    outputs
        .into_iter()
        .map(|output| match class_counts.iter().find(|(name, _)| *name == output.name) {
            Some(&(_, count)) => top_classes(&output, count, labels.of(&output.name), batching),
            None => Ok(output),
        })
        .collect()
}

/// The top `count` classes of `output`, row by row when it is batched.
fn top_classes(output: &Tensor, count: usize, labels: &[String], batching: bool) -> Result<Tensor> {
    let unsupported = || {
        Error::invalid(format!(
            "class result not available for output due to unsupported type '{}'",
            output.datatype.kserve_name()
        ))
    };
    let size = match output.datatype {
        DataType::Bool | DataType::Fp16 | DataType::Bf16 | DataType::Bytes => return Err(unsupported()),
        other => other.element_size().ok_or_else(unsupported)?,
    };
    let rows = match (batching, output.shape.first()) {
        (true, Some(&batch)) => Some(batch.max(0) as usize),
        _ => None,
    };
    let row_bytes = match rows {
        Some(0) => 0,
        Some(rows) => output.data.len() / rows,
        None => output.data.len(),
    };
    let per_row = row_bytes / size;
    if per_row > MAX_RANKED_ELEMENTS {
        return Err(Error::invalid("classification output tensor too large"));
    }
    let mut classes: Vec<String> = Vec::new();
    if row_bytes > 0 {
        for row in output.data.chunks_exact(row_bytes) {
            classes.extend(rank(row, output.datatype, count, labels));
        }
    }
    let kept = count.min(per_row) as i64;
    let shape = match rows {
        Some(rows) => vec![rows as i64, kept],
        None => vec![kept],
    };
    let data = encode_bytes_elements(classes.iter().map(String::as_bytes));
    Ok(Tensor { name: output.name.clone(), datatype: DataType::Bytes, shape, data })
}

/// One row's top `count` classes as Triton formats them.
fn rank(row: &[u8], datatype: DataType, count: usize, labels: &[String]) -> Vec<String> {
    macro_rules! ranked {
        ($t:ty, $show:expr) => {{
            let values: Vec<$t> =
                row.chunks_exact(size_of::<$t>()).map(|b| <$t>::from_le_bytes(b.try_into().expect("sized"))).collect();
            top(&values, count, labels, $show)
        }};
    }
    match datatype {
        DataType::Uint8 => ranked!(u8, |v: u8| v.to_string()),
        DataType::Uint16 => ranked!(u16, |v: u16| v.to_string()),
        DataType::Uint32 => ranked!(u32, |v: u32| v.to_string()),
        DataType::Uint64 => ranked!(u64, |v: u64| v.to_string()),
        DataType::Int8 => ranked!(i8, |v: i8| v.to_string()),
        DataType::Int16 => ranked!(i16, |v: i16| v.to_string()),
        DataType::Int32 => ranked!(i32, |v: i32| v.to_string()),
        DataType::Int64 => ranked!(i64, |v: i64| v.to_string()),
        DataType::Fp32 => ranked!(f32, |v: f32| format!("{:.6}", f64::from(v))),
        DataType::Fp64 => ranked!(f64, |v: f64| format!("{v:.6}")),
        DataType::Bool | DataType::Fp16 | DataType::Bf16 | DataType::Bytes => unreachable!("refused by top_classes"),
    }
}

/// The indices of the `count` largest values, largest first (ties in index order), each as
/// `value:index[:label]`.
fn top<T: Copy + PartialOrd>(values: &[T], count: usize, labels: &[String], show: impl Fn(T) -> String) -> Vec<String> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].partial_cmp(&values[a]).unwrap_or(std::cmp::Ordering::Equal));
    order
        .into_iter()
        .take(count)
        .map(|index| match labels.get(index).filter(|label| !label.is_empty()) {
            Some(label) => format!("{}:{index}:{label}", show(values[index])),
            None => format!("{}:{index}", show(values[index])),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::bytes_elements;

    fn fp32(name: &str, shape: Vec<i64>, values: &[f32]) -> Tensor {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into();
        Tensor { name: name.into(), datatype: DataType::Fp32, shape, data }
    }

    fn strings(tensor: &Tensor) -> Vec<String> {
        bytes_elements(&tensor.data).unwrap().iter().map(|b| String::from_utf8(b.to_vec()).unwrap()).collect()
    }

    #[test]
    fn ranks_each_row_with_labels_as_triton_prints_them() {
        let labels = Labels([("P".to_string(), Arc::new(vec!["cat".into(), "".into(), "dog".into()]))].into());
        let output = fp32("P", vec![2, 3], &[0.1, 0.7, 0.2, 3.5, -1.0, 0.25]);
        let classified = classify(vec![output], &[("P".into(), 2)], &labels, true).unwrap();
        assert_eq!(classified[0].shape, vec![2, 2]);
        assert_eq!(classified[0].datatype, DataType::Bytes);
        assert_eq!(strings(&classified[0]), ["0.700000:1", "0.200000:2:dog", "3.500000:0:cat", "0.250000:2:dog"]);
    }

    #[test]
    fn an_unbatched_output_is_one_list_and_k_is_capped_by_its_size() {
        let output = Tensor {
            name: "I".into(),
            datatype: DataType::Int32,
            shape: vec![3],
            data: [5i32, -2, 9].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into(),
        };
        let classified = classify(vec![output], &[("I".into(), 10)], &Labels::default(), false).unwrap();
        assert_eq!(classified[0].shape, vec![3]);
        assert_eq!(strings(&classified[0]), ["9:2", "5:0", "-2:1"]);
    }

    #[test]
    fn refuses_the_types_triton_refuses() {
        let output = Tensor { name: "H".into(), datatype: DataType::Fp16, shape: vec![1], data: vec![0, 0].into() };
        let error = classify(vec![output], &[("H".into(), 1)], &Labels::default(), false).unwrap_err();
        assert_eq!(error.to_string(), "class result not available for output due to unsupported type 'FP16'");
    }
}
