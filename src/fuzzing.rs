//! The server's decoders of outside input as functions of plain bytes, for the libFuzzer targets in `fuzz/`
//! and for the regression tests that replay what those targets found (`tests/fuzz_regressions.rs`). Each
//! entry point runs one input through the same code a request, a load request or a plugin's answer goes
//! through, and panics only where the server would misbehave: a refused input is an `Err` and is fine; a
//! panic, an abort, a hang or an allocation far beyond the input's size is a defect.
//!
//! The checks past decoding (the signature check, encoding an echo of the inputs) use one fixed model,
//! `SIGNATURE_CONFIG`, whose inputs cover each kind of tensor (fixed-size, BYTES, variable shapes, optional).

use std::path::Path;
use std::sync::OnceLock;

use axum::http::{HeaderMap, HeaderValue};
use bytes::Bytes;
use prost::Message;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::WasiCtxBuilder;

use crate::backends::wasm::limits::{Limits, MemoryCap};
use crate::backends::wasm::{
    convert, state::StoreState, tensor_data::HeldData, tensor_pipe::TensorPipe, wit_types as wit,
};
use crate::backends::Peers;
use crate::frontends::grpc::{convert as grpc_convert, repository as grpc_repository};
use crate::frontends::http::{self, infer as http_infer, repository as http_repository};
use crate::inference::signature::Signature;
use crate::inference::{InferenceRequest, InferenceResponse};
use crate::model_config;
use crate::proto::inference::{ModelInferRequest, RepositoryModelLoadRequest};
use crate::repository::overrides::ScratchDir;
use crate::shared_memory::SharedMemory;
use crate::tensor::{bytes_elements, encode_bytes_elements, DataType, Tensor};

/// The model requests are checked against after decoding.
const SIGNATURE_CONFIG: &str = r#"
name: "fuzz"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "INPUT2" data_type: TYPE_FP16 dims: [ -1, 2 ] optional: true },
  { name: "INPUT3" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "INPUT2" data_type: TYPE_FP16 dims: [ -1, 2 ] },
  { name: "INPUT3" data_type: TYPE_BOOL dims: [ 1 ] }
]
"#;

fn signature() -> &'static Signature {
    static SIGNATURE: OnceLock<Signature> = OnceLock::new();
    SIGNATURE.get_or_init(|| {
        let config = model_config::parse_text(SIGNATURE_CONFIG, "fuzz").expect("the fuzz model's config parses");
        Signature::from_config(&config).expect("the fuzz model's config is valid")
    })
}

/// A `config.pbtxt` (or, when it starts with `{`, a JSON config as a load request gives it) parsed, checked
/// and normalised as loading a model does, then its signature derived and its JSON rendered.
pub fn model_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let config = match text.trim_start().starts_with('{') {
        true => {
            model_config::parse_json(text, "config").and_then(|c| model_config::check(c, "fuzz", "", "config", None))
        }
        false => model_config::parse_text(text, "config.pbtxt")
            .and_then(|c| model_config::check(c, "fuzz", text, "config.pbtxt", None)),
    };
    if let Ok(config) = config {
        derive_from(&config);
    }
}

/// What loading derives from a valid config: the signature, the sequence settings, the JSON `/config` shows.
fn derive_from(config: &model_config::ModelConfig) {
    let _ = Signature::from_config(config);
    let _ = model_config::sequence::settings(config);
    let _ = model_config::to_json(config);
}

/// An HTTP infer request: `<Inference-Header-Content-Length value>\n<Content-Encoding value>\n<body>` (an
/// empty line: no such header).
pub fn http_infer(data: &[u8]) {
    let mut lines = data.splitn(3, |&b| b == b'\n');
    let (Some(length), Some(encoding), Some(body)) = (lines.next(), lines.next(), lines.next()) else { return };
    let mut headers = HeaderMap::new();
    for (name, value) in [("inference-header-content-length", length), ("content-encoding", encoding)] {
        if let (false, Ok(value)) = (value.is_empty(), HeaderValue::from_bytes(value)) {
            headers.insert(name, value);
        }
    }
    let Ok(body) = http::decoded_body(&headers, Bytes::copy_from_slice(body), 1 << 20) else { return };
    let shm = SharedMemory::new(false);
    let Ok((request, forms)) = http_infer::decode_request("fuzz".into(), String::new(), &headers, body, &shm) else {
        return;
    };
    if let Some(response) = echo(request) {
        let _ = http_infer::encode_response(&response, &forms);
    }
}

/// A gRPC `ModelInferRequest` message.
pub fn grpc_infer(data: &[u8]) {
    let Ok(message) = ModelInferRequest::decode(data) else { return };
    let shm = SharedMemory::new(false);
    let Ok((request, places)) = grpc_convert::request_from_proto(message, &shm) else { return };
    if let Some(response) = echo(request) {
        let _ = grpc_convert::response_to_proto(response, &places);
    }
}

/// Checks a request against the fuzz model and answers it with its own inputs, through the same output
/// selection a backend's answer goes through.
fn echo(request: InferenceRequest) -> Option<InferenceResponse> {
    let signature = signature();
    signature.check_request(&request).ok()?;
    for input in &request.inputs {
        input.check_data_size().expect("a checked input's bytes fit its shape");
    }
    let outputs = signature.select_outputs(&request.requested_outputs, request.inputs).ok()?;
    Some(InferenceResponse { model: request.model, version: 1, id: request.id, outputs })
}

/// A repository load request: the first byte picks HTTP (a JSON body) or gRPC (a
/// `RepositoryModelLoadRequest`); accepted files are written to a scratch directory, which must then hold
/// nothing outside it.
pub fn repository_load(data: &[u8]) {
    let Some((&protocol, body)) = data.split_first() else { return };
    let overrides = match protocol % 2 {
        0 => http::body_object(body).and_then(|body| http_repository::load_overrides(&body)),
        _ => match RepositoryModelLoadRequest::decode(body) {
            Ok(request) => grpc_repository::load_overrides(request.parameters),
            Err(_) => return,
        },
    };
    let Ok(overrides) = overrides else { return };
    if overrides.check().is_err() || overrides.files.is_empty() {
        return;
    }
    if let Ok((scratch, model_dir)) = ScratchDir::create("fuzz", &overrides.files) {
        for (path, _) in &overrides.files {
            let written = std::fs::read(model_dir.join(path)).expect("a supplied file is where its path says");
            // Of files with the same path (`1/a`, `1//a`), the last one written is there.
            let same = |other: &String| Path::new(other).components().eq(Path::new(path).components());
            let last = overrides.files.iter().rev().find(|(other, _)| same(other)).map(|(_, content)| content);
            assert_eq!(Some(&Bytes::from(written)), last, "file:{path}");
        }
        let root = scratch.root().to_path_buf();
        drop(scratch);
        assert!(!root.exists(), "the scratch directory outlived its model");
    }
}

/// A BYTES tensor's elements: parsing either refuses the buffer or reads elements that encode back to it.
pub fn bytes_tensor(data: &[u8]) {
    if let Ok(elements) = bytes_elements(data) {
        assert_eq!(&encode_bytes_elements(elements.iter().copied())[..], data);
        let tensor = Tensor {
            name: "T".into(),
            datatype: DataType::Bytes,
            shape: vec![elements.len() as i64],
            data: Bytes::copy_from_slice(data),
        };
        tensor.check_data_size().expect("a buffer of n elements fits shape [n]");
    }
}

/// The host side of the plugin contract's `tensor-data` resource and of the tensors a plugin answers with,
/// driven as a hostile plugin could: each 4-byte op makes, reads, shares or drops a handle (by any index,
/// live or not), stages one on stdin, expects, writes and takes a tensor through stdout, or returns a
/// handle as an output tensor of any type and shape. The answer then goes through output selection and
/// both encoders, and once every handle is given back the memory cap must be whole again.
pub fn wit_tensor_data(data: &[u8]) {
    use wit::HostTensorData;
    const CAP: usize = 1 << 20;
    let limits = Limits { memory_bytes: CAP, recycle_bytes: None, execute_timeout: None, fuel: None };
    let mut state = StoreState {
        wasi: WasiCtxBuilder::new().build(),
        table: ResourceTable::new(),
        label: "fuzz:1".into(),
        memory: MemoryCap::new(limits),
        deadline: None,
        peers: Peers::default(),
        version_directory: "/model".into(),
        responders: Vec::new(),
        trace: None,
        pipe: TensorPipe::default(),
    };
    let mut live: Vec<u32> = Vec::new();
    let mut outputs = Vec::new();
    for op in data.chunks_exact(4) {
        // op[1]: a live handle by position, or (top bit set) any table index, which may be stale or hold a
        // resource of another type.
        let pick = |live: &[u32]| match (op[1] & 0x80, live.len()) {
            (0, n) if n > 0 => live[usize::from(op[1]) % n],
            _ => u32::from(op[1] & 0x7f),
        };
        let handle = |rep: u32| Resource::<HeldData>::new_own(rep);
        match op[0] % 10 {
            0 => {
                let len = usize::from(u16::from_le_bytes([op[2], op[3]])) * 8;
                if let Ok(h) = state.new(vec![op[1]; len]) {
                    live.push(h.rep());
                }
            }
            1 => drop(state.read(handle(pick(&live)))),
            2 => drop(state.byte_size(handle(pick(&live)))),
            3 => {
                if let Ok(h) = state.share(handle(pick(&live))) {
                    live.push(h.rep());
                }
            }
            4 => {
                let rep = pick(&live);
                if state.drop(handle(rep)).is_ok() {
                    live.retain(|&r| r != rep);
                }
            }
            5 => drop(state.to_stdin(handle(pick(&live)))),
            6 => drop(state.expect_stdout(u64::from(u16::from_le_bytes([op[2], op[3]])) * 8)),
            // What the guest's writes to stdout do: the collection takes its part, the rest is logged.
            7 => drop(state.pipe.divert(vec![op[1]; usize::from(op[2]) * 64].into())),
            8 => {
                if let Ok(Ok(h)) = state.from_stdout() {
                    live.push(h.rep());
                }
            }
            _ => {
                let rep = pick(&live);
                // op[2]: the name (low 3 bits) and the second dimension; op[3]: the type (low 4 bits, as
                // the config enum numbers them) and the first dimension, from -2.
                let Some(datatype) = DataType::from_config(i32::from(op[3] & 0xf)) else { continue };
                let tensor = wit::Tensor {
                    name: format!("INPUT{}", op[2] & 0x7),
                    datatype: convert::datatype_to_wit(datatype),
                    shape: vec![i64::from(op[3] >> 4) - 2, i64::from(op[2] >> 3)],
                    data: wit::TensorBytes::Held(handle(rep)),
                };
                if let Ok(tensor) = convert::tensor_from_wit(&mut state, tensor) {
                    live.retain(|&r| r != rep);
                    outputs.push(tensor);
                }
            }
        }
    }
    if let Ok(selected) = signature().select_outputs(&[], outputs) {
        let response = InferenceResponse { model: "fuzz".into(), version: 1, id: String::new(), outputs: selected };
        let _ = http_infer::encode_response(&response, &[]);
        let _ = grpc_convert::response_to_proto(response, &[]);
    }
    if let Ok(Ok(h)) = state.from_stdout() {
        live.push(h.rep());
    }
    for rep in live {
        state.take_back(Resource::new_own(rep)).expect("a live handle is in the table");
    }
    state.memory.hold(CAP).expect("every handle given back leaves the whole cap");
}
