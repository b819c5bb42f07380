//! Tensors as they travel through the server: a name, a KServe data type, a shape and the raw little-endian
//! element bytes in a `bytes::Bytes`, so a tensor decoded at the frontend reaches the backend without a copy.
//! Also the two naming schemes of data types (KServe `INT32` on the wire, `TYPE_INT32` in configs) and the
//! length-prefixed framing of BYTES elements.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{Error, Result};
use crate::proto::inference::DataType as ConfigDataType;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Fp32,
    Fp64,
    Bf16,
    Bytes,
}

/// Each data type with its KServe name and its model-config enum, in one table so the two cannot drift.
const TYPES: [(DataType, &str, ConfigDataType); 14] = [
    (DataType::Bool, "BOOL", ConfigDataType::TypeBool),
    (DataType::Uint8, "UINT8", ConfigDataType::TypeUint8),
    (DataType::Uint16, "UINT16", ConfigDataType::TypeUint16),
    (DataType::Uint32, "UINT32", ConfigDataType::TypeUint32),
    (DataType::Uint64, "UINT64", ConfigDataType::TypeUint64),
    (DataType::Int8, "INT8", ConfigDataType::TypeInt8),
    (DataType::Int16, "INT16", ConfigDataType::TypeInt16),
    (DataType::Int32, "INT32", ConfigDataType::TypeInt32),
    (DataType::Int64, "INT64", ConfigDataType::TypeInt64),
    (DataType::Fp16, "FP16", ConfigDataType::TypeFp16),
    (DataType::Fp32, "FP32", ConfigDataType::TypeFp32),
    (DataType::Fp64, "FP64", ConfigDataType::TypeFp64),
    (DataType::Bf16, "BF16", ConfigDataType::TypeBf16),
    (DataType::Bytes, "BYTES", ConfigDataType::TypeString),
];

impl DataType {
    /// Parses a KServe data type name (`"INT32"`).
    pub fn from_kserve(name: &str) -> Option<Self> {
        TYPES.iter().find(|(_, n, _)| *n == name).map(|(t, _, _)| *t)
    }

    pub fn kserve_name(self) -> &'static str {
        TYPES.iter().find(|(t, _, _)| *t == self).map(|(_, n, _)| *n).expect("every type is in TYPES")
    }

    /// Converts a model-config data type; `None` for `TYPE_INVALID` and unknown values.
    pub fn from_config(value: i32) -> Option<Self> {
        let config = ConfigDataType::try_from(value).ok()?;
        TYPES.iter().find(|(_, _, c)| *c == config).map(|(t, _, _)| *t)
    }

    pub fn to_config(self) -> ConfigDataType {
        TYPES.iter().find(|(t, _, _)| *t == self).map(|(_, _, c)| *c).expect("every type is in TYPES")
    }

    /// Bytes per element, or `None` for BYTES, whose elements vary in length.
    pub fn element_size(self) -> Option<usize> {
        match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => Some(1),
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => Some(2),
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => Some(4),
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => Some(8),
            DataType::Bytes => None,
        }
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kserve_name())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub data: Bytes,
}

impl Tensor {
    /// The number of elements the shape describes; fails on a negative dimension or on overflow.
    pub fn element_count(&self) -> Result<usize> {
        element_count(&self.name, &self.shape)
    }

    /// Checks that `data` holds exactly as many elements as the shape says, each well formed (for BYTES, each
    /// length prefix fits inside the buffer and nothing is left over).
    pub fn check_data_size(&self) -> Result<()> {
        let count = self.element_count()?;
        match self.datatype.element_size() {
            Some(size) => {
                let expected = count.checked_mul(size).ok_or_else(|| too_large(&self.name))?;
                if self.data.len() != expected {
                    return Err(Error::invalid(format!(
                        "tensor '{}': shape {:?} of {} needs {expected} bytes, got {}",
                        self.name,
                        self.shape,
                        self.datatype,
                        self.data.len()
                    )));
                }
            }
            None => {
                let found = bytes_elements(&self.data)
                    .map_err(|e| Error::invalid(format!("tensor '{}': {e}", self.name)))?
                    .len();
                if found != count {
                    return Err(Error::invalid(format!(
                        "tensor '{}': shape {:?} needs {count} BYTES elements, got {found}",
                        self.name, self.shape
                    )));
                }
            }
        }
        Ok(())
    }

    /// The elements as text, comma-separated (BYTES elements as UTF-8, lossily), as Triton's tensor traces
    /// show them.
    pub fn values_text(&self) -> String {
        fn each<const N: usize>(data: &[u8], show: impl Fn([u8; N]) -> String) -> Vec<String> {
            data.chunks_exact(N).map(|chunk| show(chunk.try_into().expect("chunks of N bytes"))).collect()
        }
        let values = match self.datatype {
            DataType::Bool => self.data.iter().map(|&b| (b != 0).to_string()).collect(),
            DataType::Int8 => self.data.iter().map(|&b| (b as i8).to_string()).collect(),
            DataType::Uint8 => self.data.iter().map(u8::to_string).collect(),
            DataType::Int16 => each(&self.data, |b| i16::from_le_bytes(b).to_string()),
            DataType::Uint16 => each(&self.data, |b| u16::from_le_bytes(b).to_string()),
            DataType::Int32 => each(&self.data, |b| i32::from_le_bytes(b).to_string()),
            DataType::Uint32 => each(&self.data, |b| u32::from_le_bytes(b).to_string()),
            DataType::Int64 => each(&self.data, |b| i64::from_le_bytes(b).to_string()),
            DataType::Uint64 => each(&self.data, |b| u64::from_le_bytes(b).to_string()),
            DataType::Fp16 => each(&self.data, |b| half::f16::from_le_bytes(b).to_string()),
            DataType::Bf16 => each(&self.data, |b| half::bf16::from_le_bytes(b).to_string()),
            DataType::Fp32 => each(&self.data, |b| f32::from_le_bytes(b).to_string()),
            DataType::Fp64 => each(&self.data, |b| f64::from_le_bytes(b).to_string()),
            DataType::Bytes => bytes_elements(&self.data)
                .map(|elements| elements.iter().map(|e| String::from_utf8_lossy(e).into_owned()).collect())
                .unwrap_or_default(),
        };
        values.join(",")
    }
}

/// The number of elements in `shape`, refusing negative dimensions and sizes that overflow.
pub fn element_count(name: &str, shape: &[i64]) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, &dim| {
        let dim = usize::try_from(dim)
            .map_err(|_| Error::invalid(format!("tensor '{name}': shape {shape:?} has a negative dimension")))?;
        acc.checked_mul(dim).ok_or_else(|| too_large(name))
    })
}

fn too_large(name: &str) -> Error {
    Error::invalid(format!("tensor '{name}': shape describes more elements than can be addressed"))
}

/// Splits BYTES tensor data (each element a 4-byte little-endian length, then that many bytes) into its
/// elements.
pub fn bytes_elements(data: &[u8]) -> std::result::Result<Vec<&[u8]>, String> {
    let mut elements = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let Some((prefix, tail)) = rest.split_first_chunk::<4>() else {
            return Err(format!("BYTES data ends inside a length prefix ({} stray bytes)", rest.len()));
        };
        let len = u32::from_le_bytes(*prefix) as usize;
        if tail.len() < len {
            return Err(format!("BYTES element of {len} bytes runs past the end of the data"));
        }
        let (element, after) = tail.split_at(len);
        elements.push(element);
        rest = after;
    }
    Ok(elements)
}

/// Frames byte strings as BYTES tensor data.
pub fn encode_bytes_elements<'a>(elements: impl IntoIterator<Item = &'a [u8]>) -> Bytes {
    let mut out = BytesMut::new();
    for element in elements {
        out.put_u32_le(element.len() as u32);
        out.put_slice(element);
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kserve_and_config_names_round_trip() {
        for (t, name, config) in TYPES {
            assert_eq!(DataType::from_kserve(name), Some(t));
            assert_eq!(DataType::from_config(config as i32), Some(t));
            assert_eq!(t.to_config(), config);
        }
        assert_eq!(DataType::from_kserve("int32"), None);
        assert_eq!(DataType::from_config(0), None);
    }

    #[test]
    fn bytes_framing_round_trips_empty_and_nul_elements() {
        let elements: [&[u8]; 3] = [b"", b"a\0b", b"xyz"];
        let data = encode_bytes_elements(elements);
        assert_eq!(bytes_elements(&data).unwrap(), elements.to_vec());
    }

    #[test]
    fn truncated_bytes_data_is_rejected() {
        assert!(bytes_elements(&[1, 0, 0]).is_err());
        assert!(bytes_elements(&[5, 0, 0, 0, b'a']).is_err());
    }

    #[test]
    fn data_size_must_match_shape() {
        let t =
            Tensor { name: "x".into(), datatype: DataType::Int32, shape: vec![2, 2], data: Bytes::from(vec![0; 12]) };
        assert!(t.check_data_size().unwrap_err().to_string().contains("needs 16 bytes, got 12"));
        let t = Tensor { shape: vec![-1, 3], ..t };
        assert!(t.check_data_size().unwrap_err().to_string().contains("negative"));
    }
}
