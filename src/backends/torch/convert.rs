//! Tensors between the server's form (KServe type, shape, little-endian bytes) and the `TensorView`s the
//! libtorch side takes and lends, for the element types Triton's PyTorch backend maps: BOOL, UINT8, INT8,
//! INT16, INT32, INT64, FP16, FP32, FP64 and BF16. Libtorch has no unsigned types wider than a byte, and
//! BYTES tensors are not tensors to it.
//!
//! An input is lent as it is (the libtorch side copies it into memory of its own); an output is copied out
//! of the view it is lent as, once.

use bytes::Bytes;

use super::library::TensorView;
use crate::tensor::{DataType, Tensor};

/// Each type with its c10 ScalarType number, the codes of the contract with native/torch.
const CODES: [(DataType, i32); 10] = [
    (DataType::Uint8, 0),
    (DataType::Int8, 1),
    (DataType::Int16, 2),
    (DataType::Int32, 3),
    (DataType::Int64, 4),
    (DataType::Fp16, 5),
    (DataType::Fp32, 6),
    (DataType::Fp64, 7),
    (DataType::Bool, 11),
    (DataType::Bf16, 15),
];

/// Whether libtorch has this type.
pub fn is_supported(datatype: DataType) -> bool {
    CODES.iter().any(|(t, _)| *t == datatype)
}

/// `tensor` lent as a view; it borrows the tensor's shape and bytes, so it must not outlive it.
pub fn view(tensor: &Tensor) -> Result<TensorView, String> {
    let dtype =
        CODES.iter().find(|(t, _)| *t == tensor.datatype).map(|(_, code)| *code).ok_or_else(|| {
            format!("input '{}' is {}, which PyTorch models cannot take", tensor.name, tensor.datatype)
        })?;
    Ok(TensorView {
        dtype,
        ndim: tensor.shape.len(),
        shape: tensor.shape.as_ptr(),
        data: tensor.data.as_ptr(),
        len: tensor.data.len(),
    })
}

/// The output `name` copied out of the view it is lent as.
pub fn from_view(name: &str, view: &TensorView) -> Result<Tensor, String> {
    let datatype = CODES.iter().find(|(_, code)| *code == view.dtype).map(|(t, _)| *t);
    let datatype = datatype.ok_or_else(|| format!("output '{name}' has element type {}", view.dtype))?;
    // SAFETY: the libtorch side lends `ndim` dims and `len` bytes for the length of this call.
    let (shape, data) = unsafe {
        let shape = std::slice::from_raw_parts(view.shape, view.ndim).to_vec();
        let data = if view.len == 0 { Vec::new() } else { std::slice::from_raw_parts(view.data, view.len).to_vec() };
        (shape, data)
    };
    Ok(Tensor { name: name.to_string(), datatype, shape, data: Bytes::from(data) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_and_back_is_the_same_tensor() {
        let values: Vec<u8> = [1i32, -2, 3, 4, 5, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
        let tensor =
            Tensor { name: "X".into(), datatype: DataType::Int32, shape: vec![2, 3], data: Bytes::from(values) };
        let back = from_view("X", &view(&tensor).unwrap()).unwrap();
        assert_eq!((back.datatype, back.shape, back.data), (tensor.datatype, tensor.shape, tensor.data));
        assert!(!is_supported(DataType::Uint32) && !is_supported(DataType::Bytes) && is_supported(DataType::Bf16));
    }
}
