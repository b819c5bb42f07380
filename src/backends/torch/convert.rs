//! Tensors between the server's form (KServe type, shape, little-endian bytes) and libtorch's, for the
//! element types Triton's PyTorch backend maps: BOOL, UINT8, INT8, INT16, INT32, INT64, FP16, FP32, FP64 and
//! BF16. Libtorch has no unsigned types wider than a byte and BYTES tensors are not tensors to it.
//!
//! Both directions copy the elements once: an input is copied into memory libtorch owns, because a module may
//! keep a view of its input past the call (a stateful module stores one in an attribute), which must not
//! point into a request that is gone.

use bytes::Bytes;
use tch::Kind;

use crate::tensor::{DataType, Tensor};

/// The libtorch element type of a server type, if there is one.
pub fn kind_of(datatype: DataType) -> Option<Kind> {
    Some(match datatype {
        DataType::Bool => Kind::Bool,
        DataType::Uint8 => Kind::Uint8,
        DataType::Int8 => Kind::Int8,
        DataType::Int16 => Kind::Int16,
        DataType::Int32 => Kind::Int,
        DataType::Int64 => Kind::Int64,
        DataType::Fp16 => Kind::Half,
        DataType::Fp32 => Kind::Float,
        DataType::Fp64 => Kind::Double,
        DataType::Bf16 => Kind::BFloat16,
        DataType::Uint16 | DataType::Uint32 | DataType::Uint64 | DataType::Bytes => return None,
    })
}

/// The server type of a libtorch element type, if there is one.
pub fn datatype_of(kind: Kind) -> Option<DataType> {
    [
        DataType::Bool,
        DataType::Uint8,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bf16,
    ]
    .into_iter()
    .find(|&datatype| kind_of(datatype) == Some(kind))
}

/// A libtorch tensor holding a copy of `tensor`'s elements under its shape (checked against its size
/// before a request reaches a backend).
pub fn to_torch(tensor: &Tensor) -> Result<tch::Tensor, String> {
    let kind = kind_of(tensor.datatype)
        .ok_or_else(|| format!("input '{}' is {}, which PyTorch models cannot take", tensor.name, tensor.datatype))?;
    tch::Tensor::f_from_data_size(&tensor.data, &tensor.shape, kind)
        .map_err(|e| format!("input '{}': {e}", tensor.name))
}

/// `value` as the output `name`: its elements copied out in row-major order.
pub fn from_torch(name: &str, value: &tch::Tensor) -> Result<Tensor, String> {
    let kind = value.f_kind().map_err(|e| format!("output '{name}': {e}"))?;
    let datatype = datatype_of(kind)
        .ok_or_else(|| format!("output '{name}' is a {kind:?} tensor, which has no Triton data type"))?;
    let contiguous = value.f_contiguous().map_err(|e| format!("output '{name}': {e}"))?;
    let count = contiguous.numel();
    let mut data = vec![0u8; count * kind.elt_size_in_bytes()];
    contiguous.f_copy_data_u8(&mut data, count).map_err(|e| format!("output '{name}': {e}"))?;
    Ok(Tensor { name: name.to_string(), datatype, shape: value.size(), data: Bytes::from(data) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mapped_type_comes_back_as_itself() {
        for datatype in [DataType::Bool, DataType::Int32, DataType::Fp16, DataType::Fp64, DataType::Bf16] {
            let kind = kind_of(datatype).unwrap();
            assert_eq!(datatype_of(kind), Some(datatype));
        }
        assert_eq!(kind_of(DataType::Uint32), None);
        assert_eq!(kind_of(DataType::Bytes), None);
    }

    #[test]
    fn elements_round_trip_through_libtorch() {
        let values: Vec<u8> = [1i32, -2, 3, 4, 5, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
        let tensor =
            Tensor { name: "X".into(), datatype: DataType::Int32, shape: vec![2, 3], data: Bytes::from(values) };
        let torch = to_torch(&tensor).unwrap();
        let back = from_torch("Y", &torch.transpose(0, 1).transpose(0, 1)).unwrap();
        assert_eq!((back.shape, back.data), (tensor.shape, tensor.data));
        let transposed = from_torch("Y", &torch.transpose(0, 1)).unwrap();
        assert_eq!(transposed.shape, vec![3, 2]);
        assert_eq!(&transposed.data[4..8], &4i32.to_le_bytes());
    }
}
