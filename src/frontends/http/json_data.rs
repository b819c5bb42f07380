//! Tensor data in KServe JSON: `data` is a (possibly nested) array of numbers, booleans or strings in
//! row-major order. Decoding checks every element against the tensor's data type and the element count
//! against its shape; encoding streams the elements straight into the response (flattened, as KServe
//! allows) without building an intermediate JSON tree.

use bytes::{BufMut, Bytes, BytesMut};
use half::{bf16, f16};
use serde::ser::{Error as _, Serialize, SerializeSeq, Serializer};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::tensor::{bytes_elements, DataType, Tensor};

/// Converts the JSON `data` of input `name` into tensor bytes, expecting exactly `count` elements.
/// Nothing is allocated from `count`, which is the client's claim: buffers are sized by the elements that
/// actually arrived, and compared with the claim before any tensor bytes are made.
pub fn decode(name: &str, datatype: DataType, count: usize, data: &Value) -> Result<Bytes> {
    let mut elements = Vec::new();
    flatten(data, &mut elements);
    if elements.len() != count {
        return Err(Error::invalid(format!(
            "input '{name}': the shape describes {count} elements but data has {}",
            elements.len()
        )));
    }
    let mut out = BytesMut::with_capacity(elements.len() * datatype.element_size().unwrap_or(8));
    for (index, element) in elements.into_iter().enumerate() {
        put_element(&mut out, datatype, element).ok_or_else(|| {
            Error::invalid(format!("input '{name}': data[{index}] = {element} is not a valid {datatype} value"))
        })?;
    }
    Ok(out.freeze())
}

fn flatten<'v>(value: &'v Value, out: &mut Vec<&'v Value>) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| flatten(item, out)),
        other => out.push(other),
    }
}

fn put_element(out: &mut BytesMut, datatype: DataType, value: &Value) -> Option<()> {
    match datatype {
        DataType::Bool => out.put_u8(u8::from(value.as_bool()?)),
        DataType::Uint8 => out.put_u8(u8::try_from(value.as_u64()?).ok()?),
        DataType::Uint16 => out.put_u16_le(u16::try_from(value.as_u64()?).ok()?),
        DataType::Uint32 => out.put_u32_le(u32::try_from(value.as_u64()?).ok()?),
        DataType::Uint64 => out.put_u64_le(value.as_u64()?),
        DataType::Int8 => out.put_i8(i8::try_from(value.as_i64()?).ok()?),
        DataType::Int16 => out.put_i16_le(i16::try_from(value.as_i64()?).ok()?),
        DataType::Int32 => out.put_i32_le(i32::try_from(value.as_i64()?).ok()?),
        DataType::Int64 => out.put_i64_le(value.as_i64()?),
        DataType::Fp16 => out.put_u16_le(f16::from_f64(value.as_f64()?).to_bits()),
        DataType::Bf16 => out.put_u16_le(bf16::from_f64(value.as_f64()?).to_bits()),
        DataType::Fp32 => out.put_f32_le(value.as_f64()? as f32),
        DataType::Fp64 => out.put_f64_le(value.as_f64()?),
        DataType::Bytes => {
            let text = value.as_str()?;
            out.put_u32_le(text.len() as u32);
            out.put_slice(text.as_bytes());
        }
    }
    Some(())
}

/// Serialises a tensor's elements as a flat JSON array. BYTES elements must be UTF-8 to be representable;
/// otherwise serialisation fails with a message telling the client to ask for binary data.
pub struct JsonData<'t>(pub &'t Tensor);

impl Serialize for JsonData<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let tensor = self.0;
        let data = &tensor.data[..];
        macro_rules! fixed {
            ($width:literal, $convert:expr) => {
                serializer.collect_seq(data.chunks_exact($width).map(|c| $convert(c.try_into().unwrap())))
            };
        }
        match tensor.datatype {
            DataType::Bool => serializer.collect_seq(data.iter().map(|&b| b != 0)),
            DataType::Uint8 => serializer.collect_seq(data.iter()),
            DataType::Int8 => serializer.collect_seq(data.iter().map(|&b| b as i8)),
            DataType::Uint16 => fixed!(2, u16::from_le_bytes),
            DataType::Int16 => fixed!(2, i16::from_le_bytes),
            DataType::Uint32 => fixed!(4, u32::from_le_bytes),
            DataType::Int32 => fixed!(4, i32::from_le_bytes),
            DataType::Uint64 => fixed!(8, u64::from_le_bytes),
            DataType::Int64 => fixed!(8, i64::from_le_bytes),
            DataType::Fp16 => fixed!(2, |b| f16::from_le_bytes(b).to_f32()),
            DataType::Bf16 => fixed!(2, |b| bf16::from_le_bytes(b).to_f32()),
            DataType::Fp32 => fixed!(4, f32::from_le_bytes),
            DataType::Fp64 => fixed!(8, f64::from_le_bytes),
            DataType::Bytes => {
                let elements = bytes_elements(data).map_err(S::Error::custom)?;
                let mut seq = serializer.serialize_seq(Some(elements.len()))?;
                for element in elements {
                    let text = std::str::from_utf8(element).map_err(|_| {
                        S::Error::custom(format!(
                            "output '{}' holds bytes that are not UTF-8 and cannot be sent as JSON; request it with binary_data",
                            tensor.name
                        ))
                    })?;
                    seq.serialize_element(text)?;
                }
                seq.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn decodes_nested_arrays_and_checks_ranges() {
        let bytes = decode("x", DataType::Int8, 4, &json!([[1, -2], [3, 127]])).unwrap();
        assert_eq!(&bytes[..], &[1, 254, 3, 127]);
        assert!(decode("x", DataType::Int8, 1, &json!([128])).unwrap_err().to_string().contains("not a valid INT8"));
        assert!(decode("x", DataType::Int32, 3, &json!([1, 2])).unwrap_err().to_string().contains("3 elements"));
        assert!(decode("x", DataType::Bool, 1, &json!([1])).is_err());
    }

    #[test]
    fn a_huge_declared_count_allocates_nothing_and_is_refused() {
        for count in [1usize << 45, 1 << 60, usize::MAX] {
            let error = decode("x", DataType::Fp64, count, &json!([1.0, 2.0])).unwrap_err().to_string();
            assert!(error.contains("data has 2"), "{error}");
        }
    }

    #[test]
    fn encodes_every_type_flat() {
        let t = |datatype, data: Vec<u8>| Tensor { name: "o".into(), datatype, shape: vec![], data: Bytes::from(data) };
        let to = |t: &Tensor| serde_json::to_value(JsonData(t)).unwrap();
        assert_eq!(to(&t(DataType::Int16, vec![0xff, 0xff, 2, 0])), json!([-1, 2]));
        assert_eq!(to(&t(DataType::Bool, vec![1, 0])), json!([true, false]));
        assert_eq!(to(&t(DataType::Fp16, f16::from_f32(1.5).to_le_bytes().to_vec())), json!([1.5]));
        let text = crate::tensor::encode_bytes_elements([&b"a\0"[..], b""]);
        assert_eq!(to(&t(DataType::Bytes, text.to_vec())), json!(["a\u{0}", ""]));
        assert!(serde_json::to_value(JsonData(&t(DataType::Bytes, vec![1, 0, 0, 0, 0xff]))).is_err());
    }
}
