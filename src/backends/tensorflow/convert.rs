//! Tensors between the server's form (KServe type, shape, little-endian bytes) and TensorFlow's, for the
//! types both have: BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64, and BYTES as TensorFlow strings
//! (UTF-8 text: the crate's string tensors hold Rust `String`s). BF16 is refused at load. Each direction
//! copies the elements once.

use bytes::Bytes;
use tensorflow::{DataType as TfType, Tensor as TfTensor, TensorType};

use crate::tensor::{bytes_elements, encode_bytes_elements, DataType, Tensor};

/// A TensorFlow tensor of one of the types this backend moves.
pub enum Value {
    Bool(TfTensor<bool>),
    U8(TfTensor<u8>),
    U16(TfTensor<u16>),
    U32(TfTensor<u32>),
    U64(TfTensor<u64>),
    I8(TfTensor<i8>),
    I16(TfTensor<i16>),
    I32(TfTensor<i32>),
    I64(TfTensor<i64>),
    F16(TfTensor<half::f16>),
    F32(TfTensor<f32>),
    F64(TfTensor<f64>),
    Str(TfTensor<String>),
}

/// Calls `$body` with `$t` bound to the Rust element type of the server type `$datatype` and `$v` to its
/// `Value` variant; `$other` for the types this backend moves no other way (BOOL) or not at all.
macro_rules! with_element {
    ($datatype:expr, $t:ident, $v:ident => $body:expr, $other:expr) => {
        match $datatype {
            DataType::Uint8 => {
                type $t = u8;
                #[allow(unused_imports)]
                use Value::U8 as $v;
                $body
            }
            DataType::Uint16 => {
                type $t = u16;
                #[allow(unused_imports)]
                use Value::U16 as $v;
                $body
            }
            DataType::Uint32 => {
                type $t = u32;
                #[allow(unused_imports)]
                use Value::U32 as $v;
                $body
            }
            DataType::Uint64 => {
                type $t = u64;
                #[allow(unused_imports)]
                use Value::U64 as $v;
                $body
            }
            DataType::Int8 => {
                type $t = i8;
                #[allow(unused_imports)]
                use Value::I8 as $v;
                $body
            }
            DataType::Int16 => {
                type $t = i16;
                #[allow(unused_imports)]
                use Value::I16 as $v;
                $body
            }
            DataType::Int32 => {
                type $t = i32;
                #[allow(unused_imports)]
                use Value::I32 as $v;
                $body
            }
            DataType::Int64 => {
                type $t = i64;
                #[allow(unused_imports)]
                use Value::I64 as $v;
                $body
            }
            DataType::Fp16 => {
                type $t = half::f16;
                #[allow(unused_imports)]
                use Value::F16 as $v;
                $body
            }
            DataType::Fp32 => {
                type $t = f32;
                #[allow(unused_imports)]
                use Value::F32 as $v;
                $body
            }
            DataType::Fp64 => {
                type $t = f64;
                #[allow(unused_imports)]
                use Value::F64 as $v;
                $body
            }
            DataType::Bool | DataType::Bytes | DataType::Bf16 => $other,
        }
    };
}
pub(super) use with_element;

/// Calls `$body` with `$tensor` bound to the typed tensor inside `$value`.
macro_rules! with_value {
    ($value:expr, $tensor:ident => $body:expr) => {
        match $value {
            Value::Bool($tensor) => $body,
            Value::U8($tensor) => $body,
            Value::U16($tensor) => $body,
            Value::U32($tensor) => $body,
            Value::U64($tensor) => $body,
            Value::I8($tensor) => $body,
            Value::I16($tensor) => $body,
            Value::I32($tensor) => $body,
            Value::I64($tensor) => $body,
            Value::F16($tensor) => $body,
            Value::F32($tensor) => $body,
            Value::F64($tensor) => $body,
            Value::Str($tensor) => $body,
        }
    };
}
pub(super) use with_value;

/// TensorFlow's type for a server type this backend moves.
pub fn tf_type(datatype: DataType) -> Option<TfType> {
    match datatype {
        DataType::Bool => Some(TfType::Bool),
        DataType::Bytes => Some(TfType::String),
        other => with_element!(other, T, _V => Some(T::data_type()), None),
    }
}

/// A TensorFlow tensor holding a copy of `tensor`'s elements under its shape.
pub fn to_tf(tensor: &Tensor) -> Result<Value, String> {
    let dims: Vec<u64> = tensor.shape.iter().map(|&d| d as u64).collect();
    if tensor.datatype == DataType::Bool {
        let values: Vec<bool> = tensor.data.iter().map(|&b| b != 0).collect();
        return TfTensor::new(&dims).with_values(&values).map(Value::Bool).map_err(|e| e.to_string());
    }
    if tensor.datatype == DataType::Bytes {
        let elements = bytes_elements(&tensor.data).map_err(|e| format!("input '{}': {e}", tensor.name))?;
        let strings = elements
            .into_iter()
            .enumerate()
            .map(|(i, element)| {
                String::from_utf8(element.to_vec()).map_err(|_| {
                    format!("input '{}': element {i} is not UTF-8, which TensorFlow strings here must be", tensor.name)
                })
            })
            .collect::<Result<Vec<String>, String>>()?;
        return TfTensor::new(&dims)
            .with_values(&strings)
            .map(Value::Str)
            .map_err(|e| format!("input '{}': {e}", tensor.name));
    }
    with_element!(tensor.datatype, T, V => {
        let mut value = TfTensor::<T>::new(&dims);
        let size = std::mem::size_of::<T>();
        if value.len() * size != tensor.data.len() {
            return Err(format!("input '{}' holds {} bytes for shape {:?}", tensor.name, tensor.data.len(), tensor.shape));
        }
        // SAFETY: T is a plain number type (every bit pattern is a value) and `value` holds exactly
        // `tensor.data.len()` bytes of them, checked above; the two buffers do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(tensor.data.as_ptr(), value.as_mut_ptr().cast::<u8>(), tensor.data.len());
        }
        Ok(V(value))
    }, Err(format!("input '{}' is {}, which TensorFlow models here cannot take", tensor.name, tensor.datatype)))
}

/// A fetched string tensor as the BYTES output `name`.
pub fn from_tf_strings(name: &str, value: &TfTensor<String>) -> Tensor {
    let shape = value.dims().iter().map(|&d| d as i64).collect();
    let data = encode_bytes_elements(value.iter().map(|s| s.as_bytes()));
    Tensor { name: name.to_string(), datatype: DataType::Bytes, shape, data }
}

/// The bytes of a fetched tensor, named `name`, of the server type `datatype`.
pub fn from_tf<T: TensorType>(name: &str, datatype: DataType, value: &TfTensor<T>) -> Tensor {
    let bytes = if datatype == DataType::Bool {
        // SAFETY: a bool is one byte, 0 or 1, as BOOL is on the wire.
        unsafe { std::slice::from_raw_parts(value.as_ptr() as *const u8, value.len()) }.to_vec()
    } else {
        // SAFETY: T is a plain number type; the slice covers exactly the tensor's elements.
        unsafe { std::slice::from_raw_parts(value.as_ptr() as *const u8, std::mem::size_of_val::<[T]>(value)) }.to_vec()
    };
    let shape = value.dims().iter().map(|&d| d as i64).collect();
    Tensor { name: name.to_string(), datatype, shape, data: Bytes::from(bytes) }
}
