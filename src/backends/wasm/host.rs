//! What a plugin instance's store holds and what the host gives it: the WASI context (sandbox), the
//! `tessera:backend/host` imports (log, and BLS calls to other models; tensor handles are in `tensor_data`), and stdout/stderr streams that turn guest output into server log lines
//! tagged with the model, so a plugin's `println!` lands where operators look.

use std::sync::{Arc, Weak};
use std::time::Instant;

use bytes::Bytes;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::tessera::backend::{host, types};
use super::convert;
use super::limits::MemoryCap;
use crate::backends::{ModelCaller, Peers};

pub struct StoreState {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    /// "model:version", for log lines.
    pub label: Arc<str>,
    /// The instance's memory limit.
    pub memory: MemoryCap,
    /// When the `execute` call under way must stop (see `limits`); `None` outside calls.
    pub deadline: Option<Instant>,
    /// The server's other models, for BLS calls.
    pub peers: Peers,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl types::Host for StoreState {}

impl host::Host for StoreState {
    async fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        let model = &*self.label;
        match level {
            types::LogLevel::Error => tracing::error!(target: "plugin", model, "{message}"),
            types::LogLevel::Warn => tracing::warn!(target: "plugin", model, "{message}"),
            types::LogLevel::Info => tracing::info!(target: "plugin", model, "{message}"),
            types::LogLevel::Verbose => tracing::debug!(target: "plugin", model, "{message}"),
        }
        Ok(())
    }

    /// A BLS call: the request goes through the callee's checks and scheduler like a client's, and any
    /// failure comes back to the plugin as an error it can handle.
    async fn infer(
        &mut self,
        model: String,
        version: String,
        request: types::Request,
    ) -> wasmtime::Result<Result<types::Response, String>> {
        let request = convert::request_from_wit(self, model.clone(), version, request)?;
        let Some(caller) = self.caller() else {
            return Ok(Err("the server is not accepting calls between models yet".into()));
        };
        let call = caller.infer(request);
        // The plugin's own deadline cannot fire while the host awaits (no guest code runs to see the epoch),
        // so the wait is bounded here; otherwise a model calling itself would wait for itself forever.
        let answer = match self.deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline.into(), call).await {
                Ok(answer) => answer,
                Err(_) => return Ok(Err(format!("'{model}' did not answer before this plugin's execute timeout"))),
            },
            None => call.await,
        };
        match answer {
            Ok(response) => {
                let outputs = response
                    .outputs
                    .iter()
                    .map(|t| convert::tensor_to_wit(t, |data| self.hold(data)))
                    .collect::<wasmtime::Result<_>>()?;
                Ok(Ok(types::Response { outputs }))
            }
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    async fn model_ready(&mut self, model: String, version: String) -> wasmtime::Result<bool> {
        Ok(self.caller().is_some_and(|caller| caller.is_ready(&model, &version)))
    }
}

impl StoreState {
    fn caller(&self) -> Option<Arc<dyn ModelCaller>> {
        self.peers.get().and_then(Weak::upgrade)
    }
}

/// A guest's stdout or stderr: each complete line becomes one log event.
#[derive(Clone)]
pub struct GuestOutput {
    pub label: Arc<str>,
    pub stream: &'static str,
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(LineLogger { output: self.clone(), pending: Vec::new() })
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        // Only WASIp3 guests ask for this; plugins target WASIp2. Their output is discarded rather than lost
        // silently into a file.
        Box::new(tokio::io::sink())
    }
}

/// Buffers a partial line until its newline arrives (or the stream is dropped), so that output written in
/// pieces still reads as whole lines in the log.
struct LineLogger {
    output: GuestOutput,
    pending: Vec<u8>,
}

/// A guest cannot grow the host's memory without bound by never writing a newline.
const MAX_LINE: usize = 16 * 1024;

impl LineLogger {
    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        tracing::info!(target: "plugin", model = &*self.output.label, stream = self.output.stream, "{}", text.trim_end_matches('\r'));
    }
}

impl OutputStream for LineLogger {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.pending.extend_from_slice(&bytes);
        while let Some(newline) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=newline).collect();
            self.emit(&line[..line.len() - 1]);
        }
        if self.pending.len() > MAX_LINE {
            let line = std::mem::take(&mut self.pending);
            self.emit(&line);
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl Drop for LineLogger {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            self.emit(&self.pending);
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LineLogger {
    async fn ready(&mut self) {}
}
