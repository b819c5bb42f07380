//! libtorch for Tessera's PyTorch backend, as a library the server loads with `dlopen` when its first
//! PyTorch model loads, so that a server serving none pays nothing for libtorch (it would otherwise add
//! ~150 MB of memory and 0.2 s to every start) and a machine without libtorch still serves everything else.
//!
//! The contract with the server (`src/backends/torch/library.rs`) is this file's `extern "C"` functions,
//! checked by `tessera_torch_abi_version`. Tensors cross it as `TensorView`s: an element type (c10's
//! ScalarType number), a shape and the row-major bytes, borrowed for the length of the call. Errors come back
//! as a status and a message written into the caller's buffer. No panic crosses it.

use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use tch::{CModule, Device, IValue, Kind, Tensor};

/// Bumped whenever a signature below changes.
const ABI_VERSION: u32 = 1;

/// A tensor lent across the boundary for the length of one call.
#[repr(C)]
pub struct TensorView {
    /// c10's ScalarType number (see `kind_of`).
    pub dtype: i32,
    pub ndim: usize,
    pub shape: *const i64,
    pub data: *const u8,
    pub len: usize,
}

/// The element types both sides know, by c10's ScalarType numbers.
const KINDS: [(i32, Kind); 10] = [
    (0, Kind::Uint8),
    (1, Kind::Int8),
    (2, Kind::Int16),
    (3, Kind::Int),
    (4, Kind::Int64),
    (5, Kind::Half),
    (6, Kind::Float),
    (7, Kind::Double),
    (11, Kind::Bool),
    (15, Kind::BFloat16),
];

fn kind_of(code: i32) -> Option<Kind> {
    KINDS.iter().find(|(c, _)| *c == code).map(|(_, kind)| *kind)
}

fn code_of(kind: Kind) -> Option<i32> {
    KINDS.iter().find(|(_, k)| *k == kind).map(|(code, _)| *code)
}

extern "C" {
    fn shim_forward_arguments(
        path: *const c_char,
        data: *mut c_void,
        argument: extern "C" fn(*mut c_void, *const c_char, c_char, *const c_char),
        error: *mut c_char,
        error_len: usize,
    ) -> i32;
    fn shim_inference_mode(enabled: bool) -> *mut c_void;
    fn shim_inference_mode_end(guard: *mut c_void);
}

/// Writes `message` into the caller's buffer, cut to fit, NUL-terminated.
unsafe fn write_error(error: *mut c_char, error_len: usize, message: &str) {
    if error.is_null() || error_len == 0 {
        return;
    }
    let length = message.len().min(error_len - 1);
    std::ptr::copy_nonoverlapping(message.as_ptr(), error as *mut u8, length);
    *error.add(length) = 0;
}

/// Runs `body`, turning an error or a panic into status `failed` and a message.
unsafe fn guarded(error: *mut c_char, error_len: usize, failed: i32, body: impl FnOnce() -> Result<(), String>) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(message)) => {
            write_error(error, error_len, &message);
            failed
        }
        Err(_) => {
            write_error(error, error_len, "libtorch panicked");
            failed
        }
    }
}

#[no_mangle]
pub extern "C" fn tessera_torch_abi_version() -> u32 {
    ABI_VERSION
}

/// Reads the arguments of `forward` of the module at `path` (`self` left out), calling `argument(data, name,
/// kind, type)` for each: kind `T` tensor, `L` list, `D` dictionary, `O` other. 0, or -1 and the reason.
///
/// # Safety
/// `path` is a NUL-terminated string; `error` has room for `error_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tessera_torch_forward_arguments(
    path: *const c_char,
    data: *mut c_void,
    argument: extern "C" fn(*mut c_void, *const c_char, c_char, *const c_char),
    error: *mut c_char,
    error_len: usize,
) -> i32 {
    shim_forward_arguments(path, data, argument, error, error_len)
}

/// Loads the TorchScript module at `path` onto the CPU, in evaluation mode; null and the reason on failure.
///
/// # Safety
/// `path` is a NUL-terminated string; `error` has room for `error_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tessera_torch_load(path: *const c_char, error: *mut c_char, error_len: usize) -> *mut CModule {
    let path = CStr::from_ptr(path).to_string_lossy().into_owned();
    let mut loaded = None;
    guarded(error, error_len, -1, || {
        let mut module = CModule::load_on_device(&path, Device::Cpu).map_err(|e| e.to_string())?;
        module.f_set_eval().map_err(|e| e.to_string())?;
        loaded = Some(module);
        Ok(())
    });
    loaded.map_or(std::ptr::null_mut(), |module| Box::into_raw(Box::new(module)))
}

/// # Safety
/// `module` came from `tessera_torch_load` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn tessera_torch_free(module: *mut CModule) {
    if !module.is_null() {
        drop(Box::from_raw(module));
    }
}

/// Runs `forward` without gradients on `count` inputs: positional, or, when `names` is not null, one
/// dictionary from `names[i]` to `inputs[i]`. Each tensor of the result (one tensor, or a tuple or list of
/// them) is handed to `output(data, view)` in order, lent for that call. 0; 1 and the reason when an input
/// cannot be made or `forward` fails; 2 when the result is not tensors.
///
/// # Safety
/// `module` came from `tessera_torch_load`; `inputs` (and `names`, when not null) hold `count` valid
/// entries; `error` has room for `error_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tessera_torch_forward(
    module: *const CModule,
    names: *const *const c_char,
    inputs: *const TensorView,
    count: usize,
    output: extern "C" fn(*mut c_void, *const TensorView),
    data: *mut c_void,
    error: *mut c_char,
    error_len: usize,
) -> i32 {
    let module = &*module;
    let views = std::slice::from_raw_parts(inputs, count);
    let mut result = None;
    let status = guarded(error, error_len, 1, || {
        let tensors = views.iter().map(|view| to_tensor(view)).collect::<Result<Vec<_>, String>>()?;
        let arguments = if names.is_null() {
            tensors.into_iter().map(IValue::Tensor).collect()
        } else {
            let names = std::slice::from_raw_parts(names, count);
            let entries = names.iter().zip(tensors).map(|(name, tensor)| {
                (IValue::String(CStr::from_ptr(*name).to_string_lossy().into_owned()), IValue::Tensor(tensor))
            });
            vec![IValue::GenericDict(entries.collect())]
        };
        result = Some(tch::no_grad(|| module.forward_is(&arguments)).map_err(|e| e.to_string())?);
        Ok(())
    });
    if status != 0 {
        return status;
    }
    guarded(error, error_len, 2, || {
        for tensor in result_tensors(result.take().expect("set when forward succeeded"))? {
            let contiguous = tensor.f_contiguous().map_err(|e| e.to_string())?;
            let kind = contiguous.f_kind().map_err(|e| e.to_string())?;
            let dtype = code_of(kind).ok_or_else(|| format!("the model returned a {kind:?} tensor"))?;
            let shape = contiguous.size();
            let len = contiguous.numel() * kind.elt_size_in_bytes();
            let view = TensorView {
                dtype,
                ndim: shape.len(),
                shape: shape.as_ptr(),
                data: contiguous.data_ptr() as *const u8,
                len,
            };
            output(data, &view);
        }
        Ok(())
    })
}

/// A libtorch tensor holding a copy of `view`'s elements: a module may keep a view of its input past the
/// call (a stateful module stores one in an attribute), which must not point into the caller's memory.
unsafe fn to_tensor(view: &TensorView) -> Result<Tensor, String> {
    let kind = kind_of(view.dtype).ok_or_else(|| format!("unknown element type {}", view.dtype))?;
    let shape = std::slice::from_raw_parts(view.shape, view.ndim);
    let bytes = if view.len == 0 { &[][..] } else { std::slice::from_raw_parts(view.data, view.len) };
    Tensor::f_from_data_size(bytes, shape, kind).map_err(|e| e.to_string())
}

/// The tensors of `forward`'s result: one tensor, or a tuple or list of them.
fn result_tensors(result: IValue) -> Result<Vec<Tensor>, String> {
    let elements = match result {
        IValue::Tensor(tensor) => return Ok(vec![tensor]),
        IValue::TensorList(tensors) => return Ok(tensors),
        IValue::Tuple(elements) | IValue::GenericList(elements) => elements,
        _ => return Err("forward must return a tensor, or a tuple or list of tensors".into()),
    };
    elements
        .into_iter()
        .enumerate()
        .map(|(index, element)| match element {
            IValue::Tensor(tensor) => Ok(tensor),
            _ => Err(format!("output at index {index} must be of type Tensor")),
        })
        .collect()
}

/// libtorch's intra-op and inter-op thread counts (process-wide; a count ≤ 0 leaves one as it is). The
/// inter-op count can be set once per process: later calls leave it.
#[no_mangle]
pub extern "C" fn tessera_torch_set_threads(intra_op: i32, inter_op: i32) {
    static INTER_OP: std::sync::Once = std::sync::Once::new();
    if intra_op > 0 {
        tch::set_num_threads(intra_op);
    }
    if inter_op > 0 {
        INTER_OP.call_once(|| tch::set_num_interop_threads(inter_op));
    }
}

/// The TorchScript executor's profiling mode and tensor-expression fuser (process-wide; -1 leaves one as it
/// is), which Triton sets before each execution of a model that names them.
#[no_mangle]
pub extern "C" fn tessera_torch_set_jit(profiling: i32, fuser: i32) {
    if profiling >= 0 {
        tch::jit::set_profiling_mode(profiling != 0);
    }
    if fuser >= 0 {
        tch::jit::set_tensor_expr_fuser_enabled(fuser != 0);
    }
}

/// Sets up the calling thread to run models: InferenceMode on or off and the graph executor's optimisation
/// (both thread-local in libtorch). The returned guard goes to `tessera_torch_thread_end` on this thread.
#[no_mangle]
pub extern "C" fn tessera_torch_thread_begin(inference_mode: bool, optimized_execution: bool) -> *mut c_void {
    tch::jit::set_graph_executor_optimize(optimized_execution);
    // SAFETY: a plain allocation; ended by `tessera_torch_thread_end` on the same thread.
    unsafe { shim_inference_mode(inference_mode) }
}

/// # Safety
/// `guard` came from `tessera_torch_thread_begin` on this thread and is not used again.
#[no_mangle]
pub unsafe extern "C" fn tessera_torch_thread_end(guard: *mut c_void) {
    shim_inference_mode_end(guard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_type_has_one_code() {
        for (code, kind) in KINDS {
            assert_eq!((kind_of(code), code_of(kind)), (Some(kind), Some(code)));
        }
        assert_eq!(kind_of(9), None);
    }
}
