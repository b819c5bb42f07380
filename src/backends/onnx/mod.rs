//! The ONNX Runtime backend (`platform: "onnxruntime_onnx"` or `backend: "onnxruntime"`), through `ort` with
//! the runtime library loaded at run time. The library is found, in order, from
//! `--backend-config=onnxruntime,library=PATH`, `ORT_DYLIB_PATH` (unless empty), or the project's cache
//! (`.cache/onnxruntime/`, put there by setup). Without it ONNX models fail to load with that reason and
//! everything else keeps serving.
//!
//! Each instance owns one ORT session. `Session::run` blocks for as long as the model computes, so a call
//! expected to be long runs on the instance's own thread, a short one in place (`threaded`).

mod convert;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use ort::environment::Environment;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;

use super::{threaded, Backend, Instance, LoadContext};
use crate::error::{Error, LoadError, LoadResult, Result};
use crate::inference::{InferenceRequest, Signature};
use crate::model_config::{self, ModelConfig};
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::{ModelInput, ModelOutput};
use crate::tensor::Tensor;

/// The process-wide ONNX Runtime: where its library is and, once loaded, its environment.
pub struct OnnxRuntime {
    library: Option<PathBuf>,
    environment: OnceLock<LoadResult<Environment>>,
}

impl OnnxRuntime {
    /// `configured`: the library path given with `--backend-config=onnxruntime,library=PATH`, if any.
    pub fn new(configured: Option<PathBuf>) -> Self {
        let library = configured
            .or_else(|| std::env::var_os("ORT_DYLIB_PATH").filter(|path| !path.is_empty()).map(PathBuf::from))
            .or_else(|| super::setup_cache_file("onnxruntime/libonnxruntime.so"));
        OnnxRuntime { library, environment: OnceLock::new() }
    }

    /// Loads the library on first use; the outcome (or its error) is kept for every later model.
    fn environment(&self) -> LoadResult<&Environment> {
        self.environment
            .get_or_init(|| {
                let Some(path) = &self.library else {
                    return Err(LoadError::from(
                        "the ONNX Runtime library was not found: run `scripts/dev setup`, set ORT_DYLIB_PATH, \
                                or pass --backend-config=onnxruntime,library=PATH",
                    ));
                };
                let builder = ort::init_from(path)
                    .map_err(|e| format!("cannot load the ONNX Runtime library {}: {e}", path.display()))?;
                Ok(builder.with_name("tessera").build().map_err(|e| format!("cannot start ONNX Runtime: {e}"))?)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    pub fn load(&self, ctx: &LoadContext<'_>) -> LoadResult<OnnxModel> {
        let environment = self.environment()?.clone();
        let file = model_config::model_file_name(ctx.config, MODEL_FILE);
        let path = ctx.version_dir.join(file);
        if !path.is_file() {
            return Err(format!("model file {} not found", path.display()).into());
        }
        let options = SessionOptions::from_config(ctx.config)?;
        let session = options.open(&environment, &path)?;
        check_against_graph(ctx.config, &session)?;
        Ok(OnnxModel(Arc::new(Shared {
            environment,
            path,
            options,
            label: format!("{}:{}", ctx.model, ctx.version),
            signature: Signature::from_config(ctx.config)?,
            state_outputs: ctx
                .config
                .sequence_batching()
                .map(|s| s.state.iter().map(|state| state.output_name.clone()).collect())
                .unwrap_or_default(),
            batching: ctx.config.max_batch_size > 0,
            reshape: ctx
                .config
                .input
                .iter()
                .filter_map(|i| Some((i.name.clone(), i.reshape.as_ref()?.shape.clone())))
                .collect(),
            reshaped_outputs: ctx
                .config
                .output
                .iter()
                .filter(|o| o.reshape.is_some() && o.dims.iter().all(|&d| d >= 0))
                .map(|o| (o.name.clone(), o.dims.clone()))
                .collect(),
        })))
    }
}

impl OnnxRuntime {
    /// Completes a config from the graph in `version_dir`, as Triton's ONNX Runtime backend does: inputs and
    /// outputs the config leaves out are taken from the graph; a config that names neither and a graph
    /// whose every tensor has a variable first dimension batch, with `max_batch_size`
    /// `DEFAULT_MAX_BATCH_SIZE` and dynamic batching on.
    pub fn auto_complete(&self, config: &mut ModelConfig, version_dir: &Path) -> LoadResult<()> {
        if !config.input.is_empty() && !config.output.is_empty() {
            return Ok(());
        }
        let file = model_config::model_file_name(config, MODEL_FILE);
        let session = SessionOptions::from_config(config)?.open(self.environment()?, &version_dir.join(file))?;
        let graph = |outlets: &[ort::value::Outlet]| -> std::result::Result<Vec<(String, i32, Vec<i64>)>, String> {
            outlets
                .iter()
                .map(|o| {
                    let (element, dims) = convert::tensor_signature(o.dtype())
                        .ok_or_else(|| format!("'{}' is not a tensor", o.name()))?;
                    let datatype = convert::datatype_of(element)
                        .ok_or_else(|| format!("'{}' has unsupported type {element:?}", o.name()))?;
                    Ok((o.name().to_string(), datatype.to_config() as i32, dims))
                })
                .collect()
        };
        let (inputs, outputs) = (graph(session.inputs())?, graph(session.outputs())?);
        let batches = inputs.iter().chain(&outputs).all(|(_, _, dims)| dims.first() == Some(&-1));
        if config.max_batch_size == 0 && config.input.is_empty() && config.output.is_empty() && batches {
            config.max_batch_size = DEFAULT_MAX_BATCH_SIZE;
            if config.scheduling_choice.is_none() {
                config.scheduling_choice = Some(SchedulingChoice::DynamicBatching(Default::default()));
            }
        }
        let skip = usize::from(config.max_batch_size > 0);
        if config.input.is_empty() {
            config.input = inputs
                .into_iter()
                .map(|(name, data_type, dims)| ModelInput {
                    name,
                    data_type,
                    dims: dims[skip.min(dims.len())..].to_vec(),
                    ..Default::default()
                })
                .collect();
        }
        if config.output.is_empty() {
            config.output = outputs
                .into_iter()
                .map(|(name, data_type, dims)| ModelOutput {
                    name,
                    data_type,
                    dims: dims[skip.min(dims.len())..].to_vec(),
                    ..Default::default()
                })
                .collect();
        }
        Ok(())
    }
}

/// The model file's name unless the config names another.
const MODEL_FILE: &str = "model.onnx";

/// The `max_batch_size` auto-completion gives a model that can batch (Triton's default too).
const DEFAULT_MAX_BATCH_SIZE: i32 = 4;

/// Session settings from the config: `parameters` `intra_op_thread_count` / `inter_op_thread_count` (as in
/// Triton's ONNX Runtime backend) and `optimization { graph { level } }` (-1 off, 0/absent all, 1 basic,
/// 2 extended). Without a thread count, the cores are shared out between the model's instances.
#[derive(Clone, Debug)]
struct SessionOptions {
    intra_threads: usize,
    inter_threads: usize,
    level: GraphOptimizationLevel,
}

impl SessionOptions {
    fn from_config(config: &ModelConfig) -> LoadResult<Self> {
        let count = |key: &str| model_config::parameter::<usize>(config, key, "a whole number");
        let instances: usize = config.instance_group.iter().map(|g| g.count.max(1) as usize).sum::<usize>().max(1);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let level = match config.optimization.as_ref().and_then(|o| o.graph.as_ref()).map(|g| g.level) {
            Some(-1) => GraphOptimizationLevel::Disable,
            Some(1) => GraphOptimizationLevel::Level1,
            Some(2) => GraphOptimizationLevel::Level2,
            _ => GraphOptimizationLevel::All,
        };
        Ok(SessionOptions {
            intra_threads: count("intra_op_thread_count")?.filter(|&n| n > 0).unwrap_or((cores / instances).max(1)),
            inter_threads: count("inter_op_thread_count")?.filter(|&n| n > 0).unwrap_or(1),
            level,
        })
    }

    fn open(&self, environment: &Environment, path: &Path) -> LoadResult<Session> {
        // The builder's errors carry the builder back (ort::Error<SessionBuilder>); only the message matters here.
        fn fail<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> String + '_ {
            move |e| format!("cannot load {}: {e}", path.display())
        }
        Session::builder(environment)
            .map_err(fail(path))?
            .with_intra_threads(self.intra_threads)
            .map_err(fail(path))?
            .with_inter_threads(self.inter_threads)
            .map_err(fail(path))?
            .with_optimization_level(self.level)
            .map_err(fail(path))?
            .commit_from_file(path)
            .map_err(|e| fail(path)(e).into())
    }
}

/// Refuses a config that contradicts the graph: every configured input and output must exist in the graph
/// with the same element type and compatible dimensions (the batch dimension prepended when batching).
fn check_against_graph(config: &ModelConfig, session: &Session) -> LoadResult<()> {
    let batching = config.max_batch_size > 0;
    let declared = config
        .input
        .iter()
        .map(|i| ("input", &i.name, i.data_type, &i.dims, i.reshape.as_ref().map(|r| &r.shape)))
        .chain(
            config
                .output
                .iter()
                .map(|o| ("output", &o.name, o.data_type, &o.dims, o.reshape.as_ref().map(|r| &r.shape))),
        );
    for (role, name, data_type, dims, reshape) in declared {
        let outlets = if role == "input" { session.inputs() } else { session.outputs() };
        let Some(outlet) = outlets.iter().find(|o| o.name() == name.as_str()) else {
            let names: Vec<_> = outlets.iter().map(|o| o.name()).collect();
            return Err(
                format!("config {role} '{name}' is not an {role} of the model (the graph has {names:?})").into()
            );
        };
        let Some((element, graph_dims)) = convert::tensor_signature(outlet.dtype()) else {
            return Err(format!("{role} '{name}' is not a tensor in the graph").into());
        };
        let graph_type = convert::datatype_of(element);
        let config_type = crate::tensor::DataType::from_config(data_type);
        if graph_type != config_type {
            return Err(format!(
                "{role} '{name}' is {} in the config but {element:?} in the graph",
                config_type.map_or("invalid".to_string(), |t| t.to_string())
            )
            .into());
        }
        let mut expected: Vec<i64> = reshape.unwrap_or(dims).clone();
        if batching {
            expected.insert(0, -1);
        }
        let compatible = expected.len() == graph_dims.len()
            && expected.iter().zip(&graph_dims).all(|(&c, &g)| c == -1 || g == -1 || c == g);
        if !compatible {
            return Err(format!(
                "{role} '{name}' has dims {expected:?} in the config (batch dimension included) but {graph_dims:?} in the graph"
            ).into());
        }
    }
    Ok(())
}

/// A loaded ONNX model version; instances open their own sessions from the same file and options.
pub struct OnnxModel(Arc<Shared>);

struct Shared {
    environment: Environment,
    path: PathBuf,
    options: SessionOptions,
    label: String,
    signature: Signature,
    /// The implicit states' outputs (`sequence_batching { state }`): produced for the sequence batcher,
    /// which feeds them back, beside the configured outputs.
    state_outputs: Vec<String>,
    batching: bool,
    /// Inputs with a `reshape`: the shape (without batch dimension) the graph expects.
    reshape: HashMap<String, Vec<i64>>,
    /// Outputs with a `reshape`: the dims (without batch dimension) clients expect.
    reshaped_outputs: HashMap<String, Vec<i64>>,
}

impl Shared {
    /// `dims` with the batch dimension of `shape` in front when the model batches.
    fn model_shape(&self, shape: &[i64], dims: &[i64]) -> Vec<i64> {
        let batch = if self.batching { shape.first().copied() } else { None };
        batch.into_iter().chain(dims.iter().copied()).collect()
    }
}

#[async_trait]
impl Backend for OnnxModel {
    async fn create_instance(&self, instance_name: &str) -> LoadResult<Box<dyn Instance>> {
        let session = self.0.options.open(&self.0.environment, &self.0.path)?;
        let runner = OnnxRunner { session, shared: self.0.clone() };
        threaded::instance(format!("{}/{instance_name}", self.0.label), "ONNX Runtime", runner)
    }
}

/// One instance's session.
struct OnnxRunner {
    session: Session,
    shared: Arc<Shared>,
}

impl threaded::Runner for OnnxRunner {
    fn run(&mut self, request: &InferenceRequest) -> Result<Vec<Tensor>> {
        run(&mut self.session, &self.shared, request)
    }
}

fn run(session: &mut Session, shared: &Shared, request: &InferenceRequest) -> Result<Vec<Tensor>> {
    let fail = |e: String| Error::internal(format!("model '{}': {e}", shared.label));
    // Reshaped inputs: the same bytes under the model's shape.
    let reshaped: Vec<Cow<Tensor>> = request
        .inputs
        .iter()
        .map(|tensor| match shared.reshape.get(&tensor.name) {
            Some(model_dims) => {
                Cow::Owned(Tensor { shape: shared.model_shape(&tensor.shape, model_dims), ..tensor.clone() })
            }
            None => Cow::Borrowed(tensor),
        })
        .collect();
    let mut inputs = Vec::with_capacity(reshaped.len());
    for tensor in &reshaped {
        inputs.push((tensor.name.as_str(), convert::to_ort_input(tensor).map_err(Error::invalid)?));
    }
    let output_names: Vec<String> = session.outputs().iter().map(|o| o.name().to_string()).collect();
    let mut outputs = session.run(inputs).map_err(|e| fail(e.to_string()))?;
    output_names
        .iter()
        .filter(|name| {
            shared.signature.outputs.iter().any(|s| &s.name == *name) || shared.state_outputs.contains(*name)
        })
        .map(|name| {
            let value = outputs.remove(name.as_str()).ok_or_else(|| fail(format!("no value for output '{name}'")))?;
            let mut tensor = convert::from_ort(name, value).map_err(fail)?;
            if let Some(dims) = shared.reshaped_outputs.get(name.as_str()) {
                tensor.shape = shared.model_shape(&tensor.shape, dims);
            }
            Ok(tensor)
        })
        .collect()
}
