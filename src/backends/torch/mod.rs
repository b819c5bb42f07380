//! The PyTorch backend (`platform: "pytorch_libtorch"` or `backend: "pytorch"`): TorchScript modules
//! (`model.pt`) run by libtorch. libtorch lives in a library of its own, `libtessera_torch.so` (native/torch,
//! `tch` behind a small C ABI), which the server opens when the first PyTorch model loads: a server that
//! serves none pays nothing for libtorch, and without the library (or libtorch) PyTorch models fail to load
//! with the reason while everything else serves. The library is found from
//! `--backend-config=pytorch,library=PATH`, else beside the server's executable.
//!
//! Triton's PyTorch conventions hold: inputs and outputs meet `forward` as `binding` says; the parameters
//! `INFERENCE_MODE` (default on), `DISABLE_OPTIMIZED_EXECUTION`, `ENABLE_JIT_PROFILING`,
//! `ENABLE_TENSOR_FUSER`, `INTRA_OP_THREAD_COUNT` and `INTER_OP_THREAD_COUNT` apply (the thread counts are
//! process-wide in libtorch, so a model that sets one sets it for all, as in Triton). Each instance loads its
//! own module. `forward` blocks while it computes, so a call expected to be long runs on the instance's own
//! thread, a short one in place (`threaded`).

mod binding;
mod convert;
mod library;

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;

use super::{threaded, Backend, Instance, LoadContext};
use crate::error::{Error, LoadError, LoadResult, Result};
use crate::inference::{InferenceRequest, Signature};
use crate::model_config::{self, ModelConfig};
use crate::tensor::{DataType, Tensor};
use binding::{Argument, Inputs, Outputs};
use library::{ForwardError, Module, Torch};

/// The process-wide PyTorch backend: where its library is and, once opened, the library.
pub struct TorchRuntime {
    library: Option<PathBuf>,
    opened: OnceLock<LoadResult<Arc<Torch>>>,
}

impl TorchRuntime {
    /// `configured`: the library given with `--backend-config=pytorch,library=PATH`, if any.
    pub fn new(configured: Option<PathBuf>) -> Self {
        TorchRuntime { library: library::locate(configured), opened: OnceLock::new() }
    }

    /// Opens the library on first use; the outcome (or its error) is kept for every later model.
    fn torch(&self) -> LoadResult<Arc<Torch>> {
        self.opened
            .get_or_init(|| {
                let path = self.library.as_ref().ok_or_else(|| {
                    LoadError::from(
                        "the PyTorch backend library libtessera_torch.so was not found beside the server: run \
                         `scripts/dev setup` (it builds it against libtorch), or pass \
                         --backend-config=pytorch,library=PATH",
                    )
                })?;
                Ok(Arc::new(Torch::open(path)?))
            })
            .clone()
    }

    /// Loads a TorchScript model version: the file must be a TorchScript module whose `forward` the config's
    /// inputs and outputs can bind to; BYTES tensors are refused.
    pub fn load(&self, ctx: &LoadContext<'_>) -> LoadResult<TorchModel> {
        let path = ctx.version_dir.join(model_config::model_file_name(ctx.config, MODEL_FILE));
        if !path.is_file() {
            return Err(format!("model file {} not found", path.display()).into());
        }
        super::refuse_types(
            ctx.config,
            convert::is_supported,
            "the PyTorch backend takes only tensors of BOOL, UINT8, INT8, INT16, INT32, INT64, FP16, FP32, FP64 or BF16",
        )?;
        let torch = self.torch()?;
        let options = Options::from_config(ctx.config, &torch)?;
        let arguments = torch
            .forward_arguments(&path)
            .map_err(|e| format!("cannot load {} as a TorchScript module: {e}", path.display()))?;
        let arguments: Vec<Argument> =
            arguments.into_iter().map(|(name, kind, type_name)| Argument { name, kind, type_name }).collect();
        let (inputs, outputs) = binding::bind(ctx.config, &arguments)?;
        let state_outputs =
            ctx.config.sequence_batching().map(|s| s.state.iter().map(|state| state.output_name.clone()));
        Ok(TorchModel(Arc::new(Shared {
            torch,
            path,
            label: format!("{}:{}", ctx.model, ctx.version),
            signature: Signature::from_config(ctx.config)?,
            state_outputs: state_outputs.into_iter().flatten().collect(),
            inputs,
            outputs,
            options,
        })))
    }
}

/// The model file's name unless the config names another.
const MODEL_FILE: &str = "model.pt";

/// The config's `parameters` that Triton's PyTorch backend reads and that apply on CPU.
#[derive(Clone, Copy, Debug)]
struct Options {
    inference_mode: bool,
    optimized_execution: bool,
    jit_profiling: Option<bool>,
    tensor_fuser: Option<bool>,
}

impl Options {
    /// Reads the parameters, setting libtorch's thread counts when the config gives them.
    fn from_config(config: &ModelConfig, torch: &Torch) -> LoadResult<Self> {
        let flag = |key: &str| model_config::parameter::<bool>(config, key, "true or false");
        let threads = |key: &str| model_config::parameter::<i32>(config, key, "a whole number");
        let (intra_op, inter_op) = (threads("INTRA_OP_THREAD_COUNT")?, threads("INTER_OP_THREAD_COUNT")?);
        if intra_op.is_some() || inter_op.is_some() {
            torch.set_threads(intra_op.unwrap_or(0), inter_op.unwrap_or(0))?;
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
    torch: Arc<Torch>,
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
        let module =
            self.0.torch.load(&self.0.path).map_err(|e| format!("cannot load {}: {e}", self.0.path.display()))?;
        let runner = TorchRunner { module, shared: self.0.clone() };
        threaded::instance(format!("{}/{instance_name}", self.0.label), "PyTorch", runner)
    }
}

/// One instance's module.
struct TorchRunner {
    module: Module,
    shared: Arc<Shared>,
}

impl threaded::Runner for TorchRunner {
    fn run(&mut self, request: &InferenceRequest) -> Result<Vec<Tensor>> {
        // InferenceMode and the executor's optimisation are thread-local in libtorch, and a call may run on
        // any thread: set them for each call.
        let (shared, module) = (&self.shared, &mut self.module);
        let options = shared.options;
        shared
            .torch
            .on_model_thread(options.inference_mode, options.optimized_execution, || run(module, shared, request))
            .map_err(|e| Error::internal(format!("model '{}': {e}", shared.label)))?
    }
}

fn run(module: &mut Module, shared: &Shared, request: &InferenceRequest) -> Result<Vec<Tensor>> {
    let options = shared.options;
    if options.jit_profiling.is_some() || options.tensor_fuser.is_some() {
        shared.torch.set_jit(options.jit_profiling, options.tensor_fuser).map_err(Error::internal)?;
    }
    let (names, inputs) = arguments(shared, request).map_err(Error::invalid)?;
    let views = inputs.iter().map(|tensor| convert::view(tensor)).collect::<std::result::Result<Vec<_>, _>>();
    let views = views.map_err(Error::invalid)?;
    let mut values = Vec::new();
    module.forward(names.as_deref(), &views, |view| values.push(convert::from_view("", view))).map_err(
        |e| match e {
            ForwardError::Failed(e) => Error::internal(format!("PyTorch execute failure: {e}")),
            ForwardError::Result(e) => Error::internal(format!("model '{}': {e}", shared.label)),
        },
    )?;
    let wanted = shared.signature.outputs.iter().map(|spec| (&spec.name, Some(spec.datatype)));
    let states = shared.state_outputs.iter().map(|name| (name, None));
    wanted.chain(states).map(|(name, datatype)| output(shared, &values, name, datatype)).collect()
}

/// Configured output `name`: the element of the result its binding names, of the type the config says.
fn output(
    shared: &Shared,
    values: &[std::result::Result<Tensor, String>],
    name: &str,
    datatype: Option<DataType>,
) -> Result<Tensor> {
    let index = shared.outputs[name];
    let value = values.get(index).ok_or_else(|| {
        Error::internal(format!(
            "output '{name}' is element {index} of the model's result, which has {} tensors",
            values.len()
        ))
    })?;
    let tensor = value.clone().map_err(|e| Error::internal(format!("output '{name}': {e}")))?;
    let tensor = Tensor { name: name.to_string(), ..tensor };
    match datatype {
        Some(expected) if expected != tensor.datatype => Err(Error::invalid(format!(
            "configuration expects datatype {} for output '{name}', model provides {}",
            expected.to_config().as_str_name(),
            tensor.datatype.to_config().as_str_name()
        ))),
        _ => Ok(tensor),
    }
}

/// The request's inputs in the order `forward` takes them, with their names when it takes one dictionary.
fn arguments<'r>(
    shared: &Shared,
    request: &'r InferenceRequest,
) -> std::result::Result<(Option<Vec<CString>>, Vec<&'r Tensor>), String> {
    match &shared.inputs {
        Inputs::Dict => {
            let names = request.inputs.iter().map(|t| CString::new(t.name.as_str()).map_err(|_| "a NUL in a name"));
            Ok((Some(names.collect::<std::result::Result<_, _>>()?), request.inputs.iter().collect()))
        }
        Inputs::Positional(order) => {
            let tensors = order.iter().map(|name| {
                request.inputs.iter().find(|t| &t.name == name).ok_or_else(|| format!("input '{name}' is missing"))
            });
            Ok((None, tensors.collect::<std::result::Result<_, _>>()?))
        }
    }
}
