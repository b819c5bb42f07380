//! Guests' standard output and error: each complete line becomes one server log line tagged with the model
//! and the stream, so a plugin's `println!` lands where operators look. Bytes a plugin writes to stdout
//! while its tensor pipe collects them (`tensor_pipe`) are a tensor, not log lines.

use std::sync::Arc;

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use super::tensor_pipe::TensorPipe;

/// A guest's stdout or stderr: each complete line becomes one log event.
#[derive(Clone)]
pub struct GuestOutput {
    pub label: Arc<str>,
    pub stream: &'static str,
    /// Stdout's: where a collection under way takes the bytes.
    pub pipe: Option<TensorPipe>,
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

/// The most one write to the log may carry.
const LOG_WRITE: usize = 64 * 1024;

impl LineLogger {
    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        tracing::info!(target: "plugin", model = &*self.output.label, stream = self.output.stream, "{}", text.trim_end_matches('\r'));
    }
}

impl OutputStream for LineLogger {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let bytes = match &self.output.pipe {
            Some(pipe) => pipe.divert(bytes),
            None => bytes,
        };
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
        // While a tensor is being collected, all that it still wants may come in one write, which the
        // collection then keeps without a copy (wasi-libc writes as much as this allows).
        let wanted = self.output.pipe.as_ref().map_or(0, TensorPipe::wanted);
        Ok(wanted.max(LOG_WRITE))
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
