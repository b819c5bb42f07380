//! The TensorFlow backend (`platform: "tensorflow_graphdef"` with `1/model.graphdef`, or
//! `"tensorflow_savedmodel"` with the directory `1/model.savedmodel`; `backend: "tensorflow"`), through the
//! TensorFlow C API of the `tensorflow` crate, linked at run time: the library is opened when the first
//! TensorFlow model loads, so without it only TensorFlow models fail, with the reason. Setup installs it
//! from PyPI's tensorflow-cpu wheel (whose libtensorflow_cc.so.2 exports the C API) into .cache/tensorflow;
//! `--backend-config=tensorflow,library-dir=DIR` names another directory holding `libtensorflow.so`.
//!
//! A config's tensor names are the graph's: `NAME` (output 0 of operation NAME) or `NAME:INDEX` in a
//! GraphDef, the `serving_default` signature's keys in a SavedModel, as in Triton. Each instance opens its
//! own session. `Session::run` blocks, so a call expected to be long runs on the instance's own thread, a
//! short one in place (`threaded`).

mod convert;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use tensorflow::{
    Graph, ImportGraphDefOptions, Operation, SavedModelBundle, Session, SessionOptions, SessionRunArgs,
    Tensor as TfTensor,
};

use super::{threaded, Backend, Instance, LoadContext};
use crate::error::{Error, LoadResult, Result};
use crate::inference::{InferenceRequest, Signature};
use crate::model_config::{self, ModelConfig};
use crate::tensor::{DataType, Tensor};
use convert::{with_element, with_value, Value};

/// The environment variable through which the `tensorflow` crate finds `libtensorflow.so`.
const LIBRARY_DIR_VARIABLE: &str = "TENSORFLOW_DIR";

/// Tells the `tensorflow` crate where `libtensorflow.so` is: in `configured`
/// (`--backend-config=tensorflow,library-dir=DIR`), else where TENSORFLOW_DIR says, else in setup's
/// `.cache/tensorflow/lib`. The crate reads only the environment, so this sets TENSORFLOW_DIR: call it
/// before the process starts a second thread (setting the environment races with other threads' reads).
pub fn point_at_library(configured: Option<PathBuf>) {
    let dir = configured.or_else(|| {
        let set = std::env::var_os(LIBRARY_DIR_VARIABLE).filter(|dir| !dir.is_empty()).map(PathBuf::from);
        set.or_else(|| Some(super::setup_cache_file("tensorflow/lib/libtensorflow.so")?.parent()?.to_path_buf()))
    });
    if let Some(dir) = dir {
        std::env::set_var(LIBRARY_DIR_VARIABLE, dir);
    }
}

/// The process-wide TensorFlow backend: whether its library is loaded.
#[derive(Default)]
pub struct TensorflowRuntime {
    loaded: OnceLock<LoadResult<()>>,
}

/// The SavedModel signature Triton serves.
const SIGNATURE: &str = "serving_default";

impl TensorflowRuntime {
    /// Loads the library on first use; the outcome (or its error) is kept for every later model.
    fn library(&self) -> LoadResult<()> {
        self.loaded
            .get_or_init(|| {
                tensorflow::library::load().map_err(|e| {
                    format!(
                        "the TensorFlow library was not found ({e}): run `scripts/dev setup` (it installs it into \
                         .cache/tensorflow), or pass --backend-config=tensorflow,library-dir=DIR with DIR holding \
                         libtensorflow.so"
                    )
                    .into()
                })
            })
            .clone()
    }

    /// Loads a GraphDef or SavedModel version: the file must be there and hold every configured tensor
    /// with the configured type.
    pub fn load(&self, ctx: &LoadContext<'_>) -> LoadResult<TensorflowModel> {
        let format = Format::of(ctx.config, ctx.version_dir)?;
        super::refuse_types(
            ctx.config,
            |t| convert::tf_type(t).is_some(),
            "the TensorFlow backend here moves numeric, BOOL and BYTES tensors, not BF16",
        )?;
        self.library()?;
        let shared = Shared {
            format,
            label: format!("{}:{}", ctx.model, ctx.version),
            signature: Signature::from_config(ctx.config)?,
        };
        // Opening once checks the model and the config against each other before any instance exists.
        shared.open()?;
        Ok(TensorflowModel(Arc::new(shared)))
    }
}

/// Where a version's model is, by its platform.
enum Format {
    GraphDef(PathBuf),
    SavedModel(PathBuf),
}

impl Format {
    fn of(config: &ModelConfig, version_dir: &Path) -> LoadResult<Format> {
        let saved = match config.platform.as_str() {
            "tensorflow_savedmodel" => true,
            "tensorflow_graphdef" => false,
            // `backend: "tensorflow"` alone: whichever the version directory holds.
            _ => !version_dir.join("model.graphdef").is_file(),
        };
        let default = if saved { "model.savedmodel" } else { "model.graphdef" };
        let path = version_dir.join(model_config::model_file_name(config, default));
        match saved {
            true if path.join("saved_model.pb").is_file() => Ok(Format::SavedModel(path)),
            false if path.is_file() => Ok(Format::GraphDef(path)),
            _ => Err(format!("model file {} not found", path.display()).into()),
        }
    }
}

/// A loaded TensorFlow model version; instances open their own sessions from it.
pub struct TensorflowModel(Arc<Shared>);

struct Shared {
    format: Format,
    label: String,
    signature: Signature,
}

/// One open model: its graph, session, and the graph tensors of the configured inputs and outputs.
struct Open {
    session: Session,
    inputs: Vec<(Operation, i32)>,
    outputs: Vec<(Operation, i32)>,
}

impl Shared {
    /// Opens a session on the model and finds the configured tensors in it, with their types checked.
    fn open(&self) -> LoadResult<Open> {
        let mut graph = Graph::new();
        let fail = |e: tensorflow::Status| format!("cannot load {}: {e}", self.path().display());
        let (session, names): (Session, TensorLookup) = match &self.format {
            Format::GraphDef(path) => {
                let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                graph.import_graph_def(&bytes, &ImportGraphDefOptions::new()).map_err(fail)?;
                (
                    Session::new(&SessionOptions::new(), &graph).map_err(fail)?,
                    Box::new(|name, _| Some(graph_tensor(name))),
                )
            }
            Format::SavedModel(path) => {
                let bundle =
                    SavedModelBundle::load(&SessionOptions::new(), ["serve"], &mut graph, path).map_err(fail)?;
                let signature = bundle
                    .meta_graph_def()
                    .get_signature(SIGNATURE)
                    .map_err(|e| format!("the SavedModel has no '{SIGNATURE}' signature: {e}"))?
                    .clone();
                let lookup = move |name: &str, input: bool| {
                    let info = if input { signature.get_input(name) } else { signature.get_output(name) };
                    info.ok().map(|info| (info.name().name.clone(), info.name().index))
                };
                (bundle.session, Box::new(lookup))
            }
        };
        let find = |name: &str, role: &str, datatype: DataType| -> LoadResult<(Operation, i32)> {
            let (operation, index) = names(name, role == "input")
                .ok_or_else(|| format!("{role} '{name}' is not in the model's signature"))?;
            let found = graph
                .operation_by_name(&operation)
                .map_err(|e| e.to_string())?
                .filter(|op| (index as usize) < op.num_outputs())
                .ok_or_else(|| format!("{role} '{name}' is not a tensor of the graph ({operation}:{index})"))?;
            let graph_type = found.output_type(index as usize);
            if Some(graph_type) != convert::tf_type(datatype) {
                return Err(format!("{role} '{name}' is {datatype} in the config but {graph_type} in the graph").into());
            }
            Ok((found, index))
        };
        let inputs = self
            .signature
            .inputs
            .iter()
            .map(|spec| find(&spec.name, "input", spec.datatype))
            .collect::<LoadResult<_>>()?;
        let outputs = self
            .signature
            .outputs
            .iter()
            .map(|spec| find(&spec.name, "output", spec.datatype))
            .collect::<LoadResult<_>>()?;
        Ok(Open { session, inputs, outputs })
    }

    fn path(&self) -> &Path {
        match &self.format {
            Format::GraphDef(path) | Format::SavedModel(path) => path,
        }
    }
}

/// Finds a configured tensor (its name, whether it is an input) in the model: the operation and output index.
type TensorLookup = Box<dyn Fn(&str, bool) -> Option<(String, i32)>>;

/// A GraphDef tensor name: `NAME` is output 0 of operation NAME; `NAME:INDEX` names another output.
fn graph_tensor(name: &str) -> (String, i32) {
    match name.rsplit_once(':').map(|(op, index)| (op, index.parse::<i32>())) {
        Some((op, Ok(index))) => (op.to_string(), index),
        _ => (name.to_string(), 0),
    }
}

#[async_trait]
impl Backend for TensorflowModel {
    async fn create_instance(&self, instance_name: &str) -> LoadResult<Box<dyn Instance>> {
        let runner = TensorflowRunner { open: self.0.open()?, shared: self.0.clone() };
        threaded::instance(format!("{}/{instance_name}", self.0.label), "TensorFlow", runner)
    }
}

/// One instance's session.
struct TensorflowRunner {
    open: Open,
    shared: Arc<Shared>,
}

impl threaded::Runner for TensorflowRunner {
    fn run(&mut self, request: &InferenceRequest) -> Result<Vec<Tensor>> {
        run(&self.open, &self.shared, request)
    }
}

fn run(open: &Open, shared: &Shared, request: &InferenceRequest) -> Result<Vec<Tensor>> {
    let values = shared
        .signature
        .inputs
        .iter()
        .map(|spec| {
            let name = &spec.name;
            let tensor =
                request.inputs.iter().find(|t| &t.name == name).ok_or_else(|| format!("input '{name}' is missing"))?;
            convert::to_tf(tensor)
        })
        .collect::<std::result::Result<Vec<Value>, String>>()
        .map_err(Error::invalid)?;
    let mut args = SessionRunArgs::new();
    for ((operation, index), value) in open.inputs.iter().zip(&values) {
        with_value!(value, tensor => args.add_feed(operation, *index, tensor));
    }
    let tokens: Vec<_> = open.outputs.iter().map(|(operation, index)| args.request_fetch(operation, *index)).collect();
    open.session.run(&mut args).map_err(|e| Error::internal(format!("model '{}': {e}", shared.label)))?;
    shared
        .signature
        .outputs
        .iter()
        .zip(tokens)
        .map(|(spec, token)| {
            let fail = |e: tensorflow::Status| Error::internal(format!("output '{}': {e}", spec.name));
            if spec.datatype == DataType::Bool {
                let value: TfTensor<bool> = args.fetch(token).map_err(fail)?;
                return Ok(convert::from_tf(&spec.name, spec.datatype, &value));
            }
            if spec.datatype == DataType::Bytes {
                let value: TfTensor<String> = args.fetch(token).map_err(fail)?;
                return Ok(convert::from_tf_strings(&spec.name, &value));
            }
            with_element!(spec.datatype, T, _V => {
                let value: TfTensor<T> = args.fetch(token).map_err(fail)?;
                Ok(convert::from_tf(&spec.name, spec.datatype, &value))
            }, Err(Error::internal(format!("output '{}' has a type this backend does not move", spec.name))))
        })
        .collect()
}
