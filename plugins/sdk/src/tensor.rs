//! Typed access to tensors. Reading a large tensor copies its elements out of the host once
//! ([`Tensor::values`], [`Tensor::strings`], [`Tensor::bytes`]); making one copies them in once
//! ([`Tensor::new`]); renaming or sharing a large one copies nothing. Small tensors (up to
//! [`INLINE_MAX`]) travel inline, where a copy costs less than a call to the host.

use crate::{DataType, Tensor, TensorBytes, TensorData};

/// The largest tensor the SDK sends inline; larger ones go to the host as `tensor-data`.
pub const INLINE_MAX: usize = 16 * 1024;

/// An element type with a fixed size, stored little-endian.
pub trait Element: Copy {
    const DATATYPE: DataType;
    const SIZE: usize;
    fn from_le(bytes: &[u8]) -> Self;
    fn append_le(self, out: &mut Vec<u8>);
}

macro_rules! element {
    ($type:ty, $datatype:ident) => {
        impl Element for $type {
            const DATATYPE: DataType = DataType::$datatype;
            const SIZE: usize = std::mem::size_of::<$type>();
            fn from_le(bytes: &[u8]) -> Self {
                <$type>::from_le_bytes(bytes.try_into().expect("chunks are SIZE long"))
            }
            fn append_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}

element!(u8, Uint8);
element!(u16, Uint16);
element!(u32, Uint32);
element!(u64, Uint64);
element!(i8, Int8);
element!(i16, Int16);
element!(i32, Int32);
element!(i64, Int64);
element!(f32, Fp32);
element!(f64, Fp64);

impl Element for bool {
    const DATATYPE: DataType = DataType::Boolean;
    const SIZE: usize = 1;
    fn from_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
    fn append_le(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
}

impl Tensor {
    /// A tensor of `values`, row-major, with `shape`.
    pub fn new<T: Element>(name: impl Into<String>, shape: impl Into<Vec<i64>>, values: &[T]) -> Tensor {
        let mut data = Vec::with_capacity(values.len() * T::SIZE);
        for value in values {
            value.append_le(&mut data);
        }
        Tensor::from_bytes(name, T::DATATYPE, shape, data)
    }

    /// A BYTES tensor of `items` (each framed with its 4-byte little-endian length, as on Triton's wire).
    pub fn from_strings<S: AsRef<[u8]>>(name: impl Into<String>, shape: impl Into<Vec<i64>>, items: &[S]) -> Tensor {
        let mut data = Vec::new();
        for item in items {
            let item = item.as_ref();
            data.extend_from_slice(&(item.len() as u32).to_le_bytes());
            data.extend_from_slice(item);
        }
        Tensor::from_bytes(name, DataType::Bytes, shape, data)
    }

    /// A tensor of any type from its raw little-endian bytes (FP16 and BF16 have no Rust type).
    pub fn from_bytes(
        name: impl Into<String>,
        datatype: DataType,
        shape: impl Into<Vec<i64>>,
        data: Vec<u8>,
    ) -> Tensor {
        let data = if data.len() <= INLINE_MAX {
            TensorBytes::Inline(data)
        } else {
            TensorBytes::Held(TensorData::new(&data))
        };
        Tensor { name: name.into(), datatype, shape: shape.into(), data }
    }

    /// The elements as `T`, which must be the tensor's data type.
    pub fn values<T: Element>(&self) -> Result<Vec<T>, String> {
        if self.datatype != T::DATATYPE {
            return Err(format!("{} is {}, not {}", self.name, kserve_name(self.datatype), kserve_name(T::DATATYPE)));
        }
        Ok(self.bytes().chunks_exact(T::SIZE).map(T::from_le).collect())
    }

    /// The elements of a BYTES tensor.
    pub fn strings(&self) -> Result<Vec<Vec<u8>>, String> {
        if self.datatype != DataType::Bytes {
            return Err(format!("{} is {}, not BYTES", self.name, kserve_name(self.datatype)));
        }
        let data = self.bytes();
        let mut items = Vec::new();
        let mut rest = &data[..];
        while !rest.is_empty() {
            let (length, tail) =
                rest.split_at_checked(4).ok_or_else(|| format!("{} has a truncated element", self.name))?;
            let length = u32::from_le_bytes(length.try_into().expect("4 bytes")) as usize;
            let (item, tail) =
                tail.split_at_checked(length).ok_or_else(|| format!("{} has a truncated element", self.name))?;
            items.push(item.to_vec());
            rest = tail;
        }
        Ok(items)
    }

    /// The raw little-endian bytes.
    pub fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        match &self.data {
            TensorBytes::Inline(bytes) => std::borrow::Cow::Borrowed(bytes),
            TensorBytes::Held(handle) => std::borrow::Cow::Owned(handle.read()),
        }
    }

    /// The number of elements its shape holds.
    pub fn element_count(&self) -> usize {
        self.shape.iter().map(|&d| d.max(0) as usize).product()
    }

    /// The same tensor under another name; nothing is copied.
    pub fn renamed(self, name: impl Into<String>) -> Tensor {
        Tensor { name: name.into(), ..self }
    }

    /// A second tensor with the same name, shape and data, for a tensor that goes to two places; a large
    /// one's data is not copied.
    pub fn share(&self) -> Tensor {
        let data = match &self.data {
            TensorBytes::Inline(bytes) => TensorBytes::Inline(bytes.clone()),
            TensorBytes::Held(handle) => TensorBytes::Held(handle.share()),
        };
        Tensor { name: self.name.clone(), datatype: self.datatype, shape: self.shape.clone(), data }
    }
}

/// The KServe name of a data type, for messages.
pub fn kserve_name(datatype: DataType) -> &'static str {
    match datatype {
        DataType::Boolean => "BOOL",
        DataType::Uint8 => "UINT8",
        DataType::Uint16 => "UINT16",
        DataType::Uint32 => "UINT32",
        DataType::Uint64 => "UINT64",
        DataType::Int8 => "INT8",
        DataType::Int16 => "INT16",
        DataType::Int32 => "INT32",
        DataType::Int64 => "INT64",
        DataType::Fp16 => "FP16",
        DataType::Fp32 => "FP32",
        DataType::Fp64 => "FP64",
        DataType::Bf16 => "BF16",
        DataType::Bytes => "BYTES",
    }
}
