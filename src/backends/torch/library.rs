//! The PyTorch backend's libtorch side, `libtessera_torch.so` (built from native/torch against libtorch), opened
//! with `dlopen` when the first PyTorch model loads. This file is the server's half of the contract that
//! native/torch/src/lib.rs defines: the same function signatures and `TensorView`, checked by the ABI version.
//! It turns the raw calls into safe ones; nothing else in the server touches a raw pointer of libtorch's.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use libloading::{Library, Symbol};

/// The ABI version of native/torch this server speaks.
const ABI_VERSION: u32 = 1;

/// A tensor lent across the boundary for the length of one call (native/torch's `TensorView`).
#[repr(C)]
pub struct TensorView {
    pub dtype: i32,
    pub ndim: usize,
    pub shape: *const i64,
    pub data: *const u8,
    pub len: usize,
}

type ArgumentFn = extern "C" fn(*mut c_void, *const c_char, c_char, *const c_char);
type OutputFn = extern "C" fn(*mut c_void, *const TensorView);

/// The library, opened, with its version checked.
pub struct Torch {
    library: Library,
}

/// A loaded module; freed on drop.
pub struct Module {
    torch: Arc<Torch>,
    raw: *mut c_void,
}

// SAFETY: a TorchScript module may be used from any thread, one call at a time (`&mut` for `forward`).
unsafe impl Send for Module {}

const ERROR_LEN: usize = 4096;

fn message(buffer: &[u8]) -> String {
    CStr::from_bytes_until_nul(buffer).map_or_else(|_| String::new(), |m| m.to_string_lossy().into_owned())
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: the path holds a NUL byte", path.display()))
}

impl Torch {
    /// Opens the library at `path`: the reason names what is missing when it or libtorch cannot be loaded.
    pub fn open(path: &Path) -> Result<Torch, String> {
        // SAFETY: the library's initialisers are libtorch's and tch's, which run no code of ours.
        let library = unsafe { Library::new(path) }
            .map_err(|e| format!("cannot load the PyTorch backend library {}: {e}", path.display()))?;
        let torch = Torch { library };
        // SAFETY: the signature is the contract's.
        let version = unsafe { torch.symbol::<extern "C" fn() -> u32>(b"tessera_torch_abi_version\0")?() };
        if version != ABI_VERSION {
            return Err(format!(
                "{} speaks version {version} of the PyTorch backend's ABI, this server {ABI_VERSION}: rebuild both",
                path.display()
            ));
        }
        Ok(torch)
    }

    /// # Safety
    /// `T` is the symbol's true type.
    unsafe fn symbol<T>(&self, name: &[u8]) -> Result<Symbol<'_, T>, String> {
        self.library.get(name).map_err(|e| format!("the PyTorch backend library lacks a function: {e}"))
    }

    /// The arguments of `forward` of the module at `path`, as (name, kind, type) — kind `T` tensor, `L`
    /// list, `D` dictionary, `O` other.
    pub fn forward_arguments(&self, path: &Path) -> Result<Vec<(String, char, String)>, String> {
        extern "C" fn collect(data: *mut c_void, name: *const c_char, kind: c_char, type_name: *const c_char) {
            // SAFETY: `data` is the Vec passed below, alive for the whole call; the strings are
            // NUL-terminated and live until this returns.
            let arguments = unsafe { &mut *(data as *mut Vec<(String, char, String)>) };
            let text = |s: *const c_char| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
            arguments.push((text(name), kind as u8 as char, text(type_name)));
        }
        let path = c_path(path)?;
        let mut arguments: Vec<(String, char, String)> = Vec::new();
        let mut error = [0u8; ERROR_LEN];
        // SAFETY: the contract's signature; every pointer is valid for the call.
        let status = unsafe {
            type F = unsafe extern "C" fn(*const c_char, *mut c_void, ArgumentFn, *mut c_char, usize) -> i32;
            self.symbol::<F>(b"tessera_torch_forward_arguments\0")?(
                path.as_ptr(),
                &mut arguments as *mut Vec<(String, char, String)> as *mut c_void,
                collect,
                error.as_mut_ptr() as *mut c_char,
                ERROR_LEN,
            )
        };
        match status {
            0 => Ok(arguments),
            _ => Err(message(&error)),
        }
    }

    /// Loads the module at `path` onto the CPU.
    pub fn load(self: &Arc<Self>, path: &Path) -> Result<Module, String> {
        let path = c_path(path)?;
        let mut error = [0u8; ERROR_LEN];
        // SAFETY: the contract's signature; every pointer is valid for the call.
        let raw = unsafe {
            type F = unsafe extern "C" fn(*const c_char, *mut c_char, usize) -> *mut c_void;
            self.symbol::<F>(b"tessera_torch_load\0")?(path.as_ptr(), error.as_mut_ptr() as *mut c_char, ERROR_LEN)
        };
        match raw.is_null() {
            true => Err(message(&error)),
            false => Ok(Module { torch: self.clone(), raw }),
        }
    }

    /// Sets libtorch's process-wide intra-op and inter-op thread counts (≤ 0 leaves one).
    pub fn set_threads(&self, intra_op: i32, inter_op: i32) -> Result<(), String> {
        // SAFETY: the contract's signature.
        unsafe { self.symbol::<extern "C" fn(i32, i32)>(b"tessera_torch_set_threads\0")?(intra_op, inter_op) };
        Ok(())
    }

    /// Sets the executor's profiling mode and fuser (process-wide; `None` leaves one).
    pub fn set_jit(&self, profiling: Option<bool>, fuser: Option<bool>) -> Result<(), String> {
        let code = |flag: Option<bool>| flag.map_or(-1, i32::from);
        // SAFETY: the contract's signature.
        unsafe { self.symbol::<extern "C" fn(i32, i32)>(b"tessera_torch_set_jit\0")?(code(profiling), code(fuser)) };
        Ok(())
    }

    /// Runs `body` with the calling thread set up to run models (InferenceMode, executor optimisation).
    pub fn on_model_thread<R>(
        &self,
        inference_mode: bool,
        optimized: bool,
        body: impl FnOnce() -> R,
    ) -> Result<R, String> {
        // SAFETY: the contract's signatures; the guard is ended on the thread that began it.
        unsafe {
            let begin = self.symbol::<extern "C" fn(bool, bool) -> *mut c_void>(b"tessera_torch_thread_begin\0")?;
            let end = self.symbol::<unsafe extern "C" fn(*mut c_void)>(b"tessera_torch_thread_end\0")?;
            let guard = begin(inference_mode, optimized);
            let result = body();
            end(guard);
            Ok(result)
        }
    }
}

/// Why `forward` failed.
pub enum ForwardError {
    /// An input could not be made, or the module raised.
    Failed(String),
    /// The result is not a tensor or a tuple or list of tensors.
    Result(String),
}

impl Module {
    /// Runs `forward` on `inputs` (positional, or one dictionary keyed by `names`), handing each tensor of
    /// the result to `output` in order, lent for that call.
    pub fn forward(
        &mut self,
        names: Option<&[CString]>,
        inputs: &[TensorView],
        mut output: impl FnMut(&TensorView),
    ) -> Result<(), ForwardError> {
        extern "C" fn call<F: FnMut(&TensorView)>(data: *mut c_void, view: *const TensorView) {
            // SAFETY: `data` is the closure passed below and `view` is valid for this call.
            unsafe { (*(data as *mut F))(&*view) }
        }
        let names: Option<Vec<*const c_char>> = names.map(|names| names.iter().map(|n| n.as_ptr()).collect());
        let mut error = [0u8; ERROR_LEN];
        type F = unsafe extern "C" fn(
            *mut c_void,
            *const *const c_char,
            *const TensorView,
            usize,
            OutputFn,
            *mut c_void,
            *mut c_char,
            usize,
        ) -> i32;
        // SAFETY: the contract's signature; `names` (when given) has one entry per input; every pointer is
        // valid for the call, and the module is used by this call alone (`&mut self`).
        let status = unsafe {
            let forward = self.torch.symbol::<F>(b"tessera_torch_forward\0").map_err(ForwardError::Failed)?;
            forward(
                self.raw,
                names.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
                inputs.as_ptr(),
                inputs.len(),
                call::<&mut dyn FnMut(&TensorView)>,
                &mut (&mut output as &mut dyn FnMut(&TensorView)) as *mut &mut dyn FnMut(&TensorView) as *mut c_void,
                error.as_mut_ptr() as *mut c_char,
                ERROR_LEN,
            )
        };
        match status {
            0 => Ok(()),
            2 => Err(ForwardError::Result(message(&error))),
            _ => Err(ForwardError::Failed(message(&error))),
        }
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: the contract's signature; `raw` came from `tessera_torch_load` and is not used again.
        unsafe {
            if let Ok(free) = self.torch.symbol::<unsafe extern "C" fn(*mut c_void)>(b"tessera_torch_free\0") {
                free(self.raw);
            }
        }
    }
}

/// Where the library is: `--backend-config=pytorch,library=PATH`, else beside the server's executable (where
/// `cargo build --release --workspace` puts it).
pub fn locate(configured: Option<PathBuf>) -> Option<PathBuf> {
    configured.or_else(|| {
        let exe = std::env::current_exe().ok()?;
        Some(exe.parent()?.join("libtessera_torch.so")).filter(|path| path.is_file())
    })
}
