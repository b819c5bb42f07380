//! Tensors in and out of ONNX Runtime. An input of a fixed-size type whose bytes are aligned for its element
//! type is handed to ORT where it lies (the request's own buffer, or the previous ensemble step's output):
//! ORT reads inputs and never writes them. Other inputs (misaligned ones, FP16, BF16) are copied as raw
//! little-endian bytes into a tensor ORT allocates. Outputs are copied out of the tensor ORT answers with.
//! BYTES tensors become ONNX string tensors and back.

use bytes::Bytes;
use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::SessionInputValue;
use ort::value::{
    DynTensor, DynTensorValueType, DynValue, PrimitiveTensorElementType, Shape, Tensor as OrtTensor, TensorElementType,
    TensorRefMut, ValueType,
};

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

/// An ORT input for a checked tensor (its data size matches its shape): its own bytes where they are
/// aligned for the element type, else a copy.
pub fn to_ort_input(tensor: &Tensor) -> Result<SessionInputValue<'_>, String> {
    let borrowed = match tensor.datatype {
        DataType::Bool => borrow::<bool>(tensor),
        DataType::Uint8 => borrow::<u8>(tensor),
        DataType::Uint16 => borrow::<u16>(tensor),
        DataType::Uint32 => borrow::<u32>(tensor),
        DataType::Uint64 => borrow::<u64>(tensor),
        DataType::Int8 => borrow::<i8>(tensor),
        DataType::Int16 => borrow::<i16>(tensor),
        DataType::Int32 => borrow::<i32>(tensor),
        DataType::Int64 => borrow::<i64>(tensor),
        DataType::Fp32 => borrow::<f32>(tensor),
        DataType::Fp64 => borrow::<f64>(tensor),
        DataType::Fp16 | DataType::Bf16 | DataType::Bytes => None,
    };
    match borrowed {
        Some(value) => value,
        None => to_ort(tensor).map(SessionInputValue::from),
    }
}

/// `tensor`'s bytes as an ORT tensor of `T` without a copy, when they are aligned for `T` and not empty.
fn borrow<T: PrimitiveTensorElementType + std::fmt::Debug>(
    tensor: &Tensor,
) -> Option<Result<SessionInputValue<'_>, String>> {
    let data = tensor.data.as_ptr();
    if tensor.data.is_empty() || !(data as usize).is_multiple_of(align_of::<T>()) {
        return None;
    }
    let memory = match MemoryInfo::new(AllocationDevice::CPU, 0, AllocatorType::Device, MemoryType::Default) {
        Ok(memory) => memory,
        Err(e) => return Some(Err(e.to_string())),
    };
    // SAFETY: the bytes are CPU memory, aligned for `T` and as many as the shape says (the tensor was checked);
    // the value borrows `tensor` for its lifetime, so they outlive it; ORT only reads an input, so handing it a
    // pointer to shared, immutable bytes is sound although its signature asks for a mutable one.
    let value = unsafe {
        TensorRefMut::<T>::from_raw(memory, data.cast_mut().cast(), Shape::new(tensor.shape.iter().copied()))
    };
    Some(value.map(SessionInputValue::from).map_err(|e| e.to_string()))
}

/// Builds an ORT value from a checked tensor (its data size matches its shape), copying its bytes.
fn to_ort(tensor: &Tensor) -> Result<DynValue, String> {
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
