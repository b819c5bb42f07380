//! Tensors in and out of ONNX Runtime. Fixed-size types are copied as raw little-endian bytes into a tensor
//! ORT allocates and out of the one it answers with (FP16 and BF16 included); BYTES tensors become ONNX
//! string tensors and back.

use bytes::Bytes;
use ort::memory::Allocator;
use ort::value::{DynTensor, DynTensorValueType, DynValue, Tensor as OrtTensor, TensorElementType, ValueType};

use crate::tensor::{bytes_elements, encode_bytes_elements, DataType, Tensor};

/// Each KServe data type and its ONNX element type, in one table.
const TYPES: [(DataType, TensorElementType); 14] = [
    (DataType::Bool, TensorElementType::Bool),
    (DataType::Uint8, TensorElementType::Uint8),
    (DataType::Uint16, TensorElementType::Uint16),
    (DataType::Uint32, TensorElementType::Uint32),
    (DataType::Uint64, TensorElementType::Uint64),
    (DataType::Int8, TensorElementType::Int8),
    (DataType::Int16, TensorElementType::Int16),
    (DataType::Int32, TensorElementType::Int32),
    (DataType::Int64, TensorElementType::Int64),
    (DataType::Fp16, TensorElementType::Float16),
    (DataType::Fp32, TensorElementType::Float32),
    (DataType::Fp64, TensorElementType::Float64),
    (DataType::Bf16, TensorElementType::Bfloat16),
    (DataType::Bytes, TensorElementType::String),
];

pub fn datatype_of(element: TensorElementType) -> Option<DataType> {
    TYPES.iter().find(|(_, e)| *e == element).map(|(d, _)| *d)
}

fn element_of(datatype: DataType) -> TensorElementType {
    TYPES.iter().find(|(d, _)| *d == datatype).map(|(_, e)| *e).expect("every data type is in TYPES")
}

/// The element type and dimensions (-1 for symbolic) of a graph input or output, if it is a tensor.
pub fn tensor_signature(value_type: &ValueType) -> Option<(TensorElementType, Vec<i64>)> {
    match value_type {
        ValueType::Tensor { ty, shape, .. } => Some((*ty, shape.iter().copied().collect())),
        _ => None,
    }
}

/// Builds an ORT value from a checked tensor (its data size matches its shape).
pub fn to_ort(tensor: &Tensor) -> Result<DynValue, String> {
    let shape: Vec<i64> = tensor.shape.clone();
    if tensor.datatype == DataType::Bytes {
        let strings = bytes_elements(&tensor.data)?
            .into_iter()
            .map(|b| String::from_utf8(b.to_vec()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| format!("input '{}': ONNX string tensors must hold UTF-8 text", tensor.name))?;
        let value = OrtTensor::from_string_array((shape, strings.as_slice())).map_err(|e| e.to_string())?;
        return Ok(value.into_dyn());
    }
    let mut value =
        DynTensor::new(&Allocator::default(), element_of(tensor.datatype), shape).map_err(|e| e.to_string())?;
    let size = value.size().unwrap_or(0);
    if size != tensor.data.len() {
        return Err(format!(
            "input '{}': ONNX Runtime allocated {size} bytes for {} bytes of data",
            tensor.name,
            tensor.data.len()
        ));
    }
    // SAFETY: the tensor was just allocated on the CPU with exactly `size` bytes, and nothing else refers to it.
    unsafe { std::ptr::copy_nonoverlapping(tensor.data.as_ptr(), value.data_ptr_mut().cast::<u8>(), size) };
    Ok(value.into_dyn())
}

/// Converts an ORT output into a tensor named `name`. A fixed-size output is copied out of ONNX Runtime's
/// memory: keeping that memory as the response's bytes instead was measured slower (see
/// docs/performance.md), since the next run then cannot reuse it and pays for fresh pages.
pub fn from_ort(name: &str, value: DynValue) -> Result<Tensor, String> {
    let Some((element, shape)) = tensor_signature(value.dtype()) else {
        return Err(format!("output '{name}' is not a tensor ({})", value.dtype()));
    };
    let datatype =
        datatype_of(element).ok_or_else(|| format!("output '{name}' has unsupported element type {element:?}"))?;
    let data = if datatype == DataType::Bytes {
        let (_, strings) = value.try_extract_strings().map_err(|e| e.to_string())?;
        encode_bytes_elements(strings.iter().map(|s| s.as_bytes()))
    } else {
        let tensor = value.downcast::<DynTensorValueType>().map_err(|e| e.to_string())?;
        let size = tensor.size().unwrap_or(0);
        // SAFETY: a CPU tensor's data pointer is valid for `size` bytes while `tensor` lives.
        Bytes::copy_from_slice(unsafe { std::slice::from_raw_parts(tensor.data_ptr().cast::<u8>(), size) })
    };
    Ok(Tensor { name: name.to_string(), datatype, shape, data })
}
