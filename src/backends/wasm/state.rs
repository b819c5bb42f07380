//! What each plugin instance's store holds: its WASI context (the sandbox), its resource table (tensor
//! handles, WASI streams, response senders), its memory cap, tensor pipe and execute deadline, the
//! responders of the requests of the call under way, and the way to the server's other models.

use std::sync::{Arc, Weak};
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::limits::MemoryCap;
use super::tensor_pipe::TensorPipe;
use crate::backends::{ModelCaller, Peers};
use crate::inference::Responder;
use crate::observability::trace::Trace;

pub struct StoreState {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    /// "model:version", for log lines.
    pub label: Arc<str>,
    /// The instance's memory limit.
    pub memory: MemoryCap,
    /// Tensors through stdin and stdout (`tensor_pipe`).
    pub pipe: TensorPipe,
    /// When the `execute` call under way must stop (see `limits`); `None` outside calls.
    pub deadline: Option<Instant>,
    /// The server's other models, for BLS calls.
    pub peers: Peers,
    /// The version directory as the sandbox shows it.
    pub version_directory: Arc<str>,
    /// During an `execute` call, where each of its requests' responses go (`None`: the model is not
    /// decoupled); empty outside calls.
    pub responders: Vec<Option<Responder>>,
    /// During an `execute` call of one traced request, its trace: BLS calls the plugin makes are its
    /// children. (In a batch of several, a call belongs to no one request.)
    pub trace: Option<Trace>,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl StoreState {
    /// The server's other models, once the server has them.
    pub fn caller(&self) -> Option<Arc<dyn ModelCaller>> {
        self.peers.get().and_then(Weak::upgrade)
    }
}
