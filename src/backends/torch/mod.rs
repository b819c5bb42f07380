//! The PyTorch backend (`platform: "pytorch_libtorch"` or `backend: "pytorch"`): TorchScript modules
//! (`model.pt`) run by libtorch through `tch`. It is compiled with the `torch` feature only, because
//! libtorch is linked at build time (`LIBTORCH`, which setup fills from the PyPI torch wheel); a server built
//! without it fails PyTorch models with that reason and serves everything else.
//!
//! Triton's PyTorch conventions hold: inputs and outputs meet `forward` as `binding` says; the parameters
//! `INFERENCE_MODE` (default on), `DISABLE_OPTIMIZED_EXECUTION`, `ENABLE_JIT_PROFILING`,
//! `ENABLE_TENSOR_FUSER`, `INTRA_OP_THREAD_COUNT` and `INTER_OP_THREAD_COUNT` (both process-wide in
//! libtorch, so the first model to set one sets it for all). Each instance loads its own module and runs it
//! on a thread of its own, as ONNX Runtime instances do, because `forward` blocks while it computes.

mod binding;
mod convert;

use std::path::PathBuf;
use std::sync::{mpsc, Arc, Once};

use async_trait::async_trait;
use tch::{CModule, Device, IValue};
use tokio::sync::oneshot;

use super::{Backend, Instance, LoadContext};
use crate::error::{Error, LoadResult, Result};
use crate::executor::Waiting;
use crate::inference::{InferenceRequest, Signature};
use crate::model_config::{self, ModelConfig};
use crate::tensor::{DataType, Tensor};
use binding::{Inputs, Outputs};

extern "C" {
    fn tessera_torch_inference_mode(enabled: bool) -> *mut std::ffi::c_void;
    fn tessera_torch_inference_mode_end(guard: *mut std::ffi::c_void);
}

/// The model file's name unless the config names another.
const MODEL_FILE: &str = "model.pt";

/// Loads a TorchScript model version: the file must be a TorchScript module whose `forward` the config's
/// inputs and outputs can bind to; BYTES tensors are refused.
pub fn load(ctx: &LoadContext<'_>) -> LoadResult<TorchModel> {
    let path = ctx.version_dir.join(model_config::model_file_name(ctx.config, MODEL_FILE));
    if !path.is_file() {
        return Err(format!("model file {} not found", path.display()).into());
    }
    refuse_bytes(ctx.config)?;
    let options = Options::from_config(ctx.config)?;
    let arguments = binding::forward_arguments(&path)
        .map_err(|e| format!("cannot load {} as a TorchScript module: {e}", path.display()))?;
    let (inputs, outputs) = binding::bind(ctx.config, &arguments)?;
    let state_outputs = ctx.config.sequence_batching().map(|s| s.state.iter().map(|state| state.output_name.clone()));
    Ok(TorchModel(Arc::new(Shared {
        path,
        label: format!("{}:{}", ctx.model, ctx.version),
        signature: Signature::from_config(ctx.config)?,
        state_outputs: state_outputs.into_iter().flatten().collect(),
        inputs,
        outputs,
        options,
    })))
}

fn refuse_bytes(config: &ModelConfig) -> LoadResult<()> {
    let tensors = (config.input.iter().map(|i| ("input", &i.name, i.data_type)))
        .chain(config.output.iter().map(|o| ("output", &o.name, o.data_type)));
    for (role, name, data_type) in tensors {
        let datatype = DataType::from_config(data_type);
        if datatype.is_some_and(|t| convert::kind_of(t).is_none()) {
            return Err(format!(
                "{role} '{name}' is {}: the PyTorch backend takes only tensors of BOOL, UINT8, INT8, INT16, INT32, \
                 INT64, FP16, FP32, FP64 or BF16",
                datatype.map_or("invalid".into(), |t| t.to_config().as_str_name().to_string())
            )
            .into());
        }
    }
    Ok(())
}

/// The config's `parameters` that Triton's PyTorch backend reads and that apply on CPU.
#[derive(Clone, Copy, Debug)]
struct Options {
    inference_mode: bool,
    optimized_execution: bool,
    jit_profiling: Option<bool>,
    tensor_fuser: Option<bool>,
}

impl Options {
    fn from_config(config: &ModelConfig) -> LoadResult<Self> {
        let flag = |key: &str| model_config::parameter::<bool>(config, key, "true or false");
        let threads = |key: &str| model_config::parameter::<i32>(config, key, "a whole number");
        static INTRA_OP: Once = Once::new();
        static INTER_OP: Once = Once::new();
        if let Some(count) = threads("INTRA_OP_THREAD_COUNT")?.filter(|&n| n > 0) {
            INTRA_OP.call_once(|| tch::set_num_threads(count));
        }
        if let Some(count) = threads("INTER_OP_THREAD_COUNT")?.filter(|&n| n > 0) {
            INTER_OP.call_once(|| tch::set_num_interop_threads(count));
        }
        Ok(Options {
            inference_mode: flag("INFERENCE_MODE")?.unwrap_or(true),
            optimized_execution: !flag("DISABLE_OPTIMIZED_EXECUTION")?.unwrap_or(false),
            jit_profiling: flag("ENABLE_JIT_PROFILING")?,
            tensor_fuser: flag("ENABLE_TENSOR_FUSER")?,
        })
    }
}

/// A loaded TorchScript model version; each instance loads the module again (no weight sharing on CPU).
pub struct TorchModel(Arc<Shared>);

struct Shared {
    path: PathBuf,
    label: String,
    signature: Signature,
    /// The implicit states' outputs (`sequence_batching { state }`), produced beside the configured outputs.
    state_outputs: Vec<String>,
    inputs: Inputs,
    outputs: Outputs,
    options: Options,
}

#[async_trait]
impl Backend for TorchModel {
    async fn create_instance(&self, instance_name: &str) -> LoadResult<Box<dyn Instance>> {
        let module = CModule::load_on_device(&self.0.path, Device::Cpu)
            .map_err(|e| format!("cannot load {}: {e}", self.0.path.display()))?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let shared = self.0.clone();
        std::thread::Builder::new()
            .name(format!("{}/{instance_name}", self.0.label))
            .spawn(move || serve(module, &shared, queue))
            .map_err(|e| format!("cannot start the instance thread: {e}"))?;
        Ok(Box::new(TorchInstance { jobs }))
    }
}

struct Job {
    requests: Vec<InferenceRequest>,
    reply: oneshot::Sender<Vec<Result<Vec<Tensor>>>>,
}

struct TorchInstance {
    jobs: mpsc::Sender<Job>,
}

#[async_trait]
impl Instance for TorchInstance {
    async fn execute(&mut self, requests: Vec<InferenceRequest>) -> Vec<Result<Vec<Tensor>>> {
        // The instance thread needs a CPU, and its answer comes without a socket: no runtime thread spins.
        let _waiting = Waiting::start();
        let (reply, answer) = oneshot::channel();
        let count = requests.len();
        let lost = || (0..count).map(|_| Err(Error::internal("the PyTorch instance thread stopped"))).collect();
        if self.jobs.send(Job { requests, reply }).is_err() {
            return lost();
        }
        answer.await.unwrap_or_else(|_| lost())
    }
}

/// The instance thread: holds InferenceMode and the executor's optimisation setting (both thread-local in
/// libtorch) for its whole life and runs each job's requests until the instance is dropped.
fn serve(module: CModule, shared: &Shared, queue: mpsc::Receiver<Job>) {
    // SAFETY: the guard is created and ended on this thread, in that order.
    let guard = unsafe { tessera_torch_inference_mode(shared.options.inference_mode) };
    tch::jit::set_graph_executor_optimize(shared.options.optimized_execution);
    for job in queue {
        let results = job.requests.iter().map(|r| run(&module, shared, r)).collect();
        let _ = job.reply.send(results);
    }
    // SAFETY: as above.
    unsafe { tessera_torch_inference_mode_end(guard) };
}

fn run(module: &CModule, shared: &Shared, request: &InferenceRequest) -> Result<Vec<Tensor>> {
    let arguments = arguments(shared, request).map_err(Error::invalid)?;
    if let Some(on) = shared.options.jit_profiling {
        tch::jit::set_profiling_mode(on);
    }
    if let Some(on) = shared.options.tensor_fuser {
        tch::jit::set_tensor_expr_fuser_enabled(on);
    }
    let result = tch::no_grad(|| module.forward_is(&arguments))
        .map_err(|e| Error::internal(format!("PyTorch execute failure: {e}")))?;
    let values = result_tensors(result).map_err(|e| Error::internal(format!("model '{}': {e}", shared.label)))?;
    let wanted = shared.signature.outputs.iter().map(|spec| (&spec.name, Some(spec.datatype)));
    let states = shared.state_outputs.iter().map(|name| (name, None));
    wanted
        .chain(states)
        .map(|(name, datatype)| {
            let index = shared.outputs[name.as_str()];
            let value = values.get(index).ok_or_else(|| {
                Error::internal(format!(
                    "output '{name}' is element {index} of the model's result, which has {} tensors",
                    values.len()
                ))
            })?;
            let tensor = convert::from_torch(name, value).map_err(Error::internal)?;
            match datatype {
                Some(expected) if expected != tensor.datatype => Err(Error::invalid(format!(
                    "configuration expects datatype {} for output '{name}', model provides {}",
                    expected.to_config().as_str_name(),
                    tensor.datatype.to_config().as_str_name()
                ))),
                _ => Ok(tensor),
            }
        })
        .collect()
}

/// `forward`'s arguments for `request`: its inputs as libtorch tensors, bound as the model's convention says.
fn arguments(shared: &Shared, request: &InferenceRequest) -> std::result::Result<Vec<IValue>, String> {
    let input = |name: &str| {
        let tensor =
            request.inputs.iter().find(|t| t.name == name).ok_or_else(|| format!("input '{name}' is missing"))?;
        convert::to_torch(tensor)
    };
    Ok(match &shared.inputs {
        Inputs::Dict => {
            let entries = request
                .inputs
                .iter()
                .map(|t| Ok((IValue::String(t.name.clone()), IValue::Tensor(convert::to_torch(t)?))))
                .collect::<std::result::Result<Vec<_>, String>>()?;
            vec![IValue::GenericDict(entries)]
        }
        Inputs::Positional(order) => {
            order.iter().map(|name| input(name).map(IValue::Tensor)).collect::<std::result::Result<_, String>>()?
        }
    })
}

/// The tensors of `forward`'s result: one tensor, or a tuple or list of them.
fn result_tensors(result: IValue) -> std::result::Result<Vec<tch::Tensor>, String> {
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
