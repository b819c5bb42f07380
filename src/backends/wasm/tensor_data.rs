//! `tessera:backend/types.tensor-data`: tensor elements the host holds for a plugin. A request's inputs
//! reach the plugin as handles to the bytes the frontend decoded, and a handle the plugin returns or passes
//! to another model goes back as those same bytes, so a tensor the plugin only routes is never copied. The
//! host copies a tensor once when the plugin reads it and once when the plugin makes one, whether as a list
//! or through its stdin and stdout (`tensor_pipe`, for guests whose bindings copy a list once more;
//! `from-latin1`, the Python runtime's way around a leak in its bindings before that, pays a decoding too).
//!
//! Handles the plugin asks for (new tensors, shared handles, BLS answers) count against the instance's
//! memory cap (`limits::MemoryCap`): the host's memory would otherwise be a way around it. A request's
//! inputs do not: the server holds them anyway, and its request size limit bounds them.

use bytes::Bytes;
use wasmtime::component::Resource;

use super::bindings::tessera::backend::types;
use super::state::StoreState;

/// What a `tensor-data` handle stands for: the bytes, and what they count against the memory cap.
pub struct HeldData {
    data: Bytes,
    cost: usize,
}

impl StoreState {
    /// Gives the plugin a handle to bytes the host already has (a request's input).
    pub fn hand_over(&mut self, data: Bytes) -> wasmtime::Result<Resource<HeldData>> {
        Ok(self.table.push(HeldData { data, cost: 0 })?)
    }

    /// Gives the plugin a handle to bytes it asked for, within its memory cap.
    pub fn hold(&mut self, data: Bytes) -> wasmtime::Result<Resource<HeldData>> {
        let cost = self.memory.hold(data.len())?;
        Ok(self.table.push(HeldData { data, cost })?)
    }

    /// Empties the tensor pipe at the end of a call: a tensor staged but not read, a collection not taken.
    pub fn empty_pipe(&mut self) {
        if let Some(cost) = self.pipe.clear() {
            self.memory.release(cost);
        }
    }

    /// Takes back the bytes behind a handle the plugin returned, passed on or dropped.
    pub fn take_back(&mut self, handle: Resource<HeldData>) -> wasmtime::Result<Bytes> {
        let held = self.table.delete(handle)?;
        self.memory.release(held.cost);
        Ok(held.data)
    }
}

impl types::HostTensorData for StoreState {
    fn new(&mut self, bytes: Vec<u8>) -> wasmtime::Result<Resource<HeldData>> {
        self.hold(Bytes::from(bytes))
    }

    fn from_latin1(&mut self, text: String) -> wasmtime::Result<Result<Resource<HeldData>, String>> {
        // ASCII text is its own latin-1 (common for zero-filled or small-valued tensors): no decoding.
        let bytes: Result<Vec<u8>, _> =
            if text.is_ascii() { Ok(text.into_bytes()) } else { text.chars().map(u8::try_from).collect() };
        match bytes {
            Ok(bytes) => self.hold(Bytes::from(bytes)).map(Ok),
            Err(_) => Ok(Err("from-latin1: a code point above 255 is not a byte".into())),
        }
    }

    fn read(&mut self, handle: Resource<HeldData>) -> wasmtime::Result<Vec<u8>> {
        Ok(self.table.get(&handle)?.data.to_vec())
    }

    fn to_stdin(&mut self, handle: Resource<HeldData>) -> wasmtime::Result<()> {
        self.pipe.stage(self.table.get(&handle)?.data.clone());
        Ok(())
    }

    fn expect_stdout(&mut self, byte_size: u64) -> wasmtime::Result<()> {
        let byte_size = usize::try_from(byte_size)?;
        // Past the memory cap the plugin is stopped here (as by `new`), before any of it is held.
        let cost = self.memory.hold(byte_size)?;
        if let Some(dropped) = self.pipe.expect(byte_size, cost) {
            self.memory.release(dropped);
        }
        Ok(())
    }

    fn from_stdout(&mut self) -> wasmtime::Result<Result<Resource<HeldData>, String>> {
        let Some((bytes, cost)) = self.pipe.collected() else {
            return Ok(Err("from-stdout: no expect-stdout came first".into()));
        };
        match bytes {
            Ok(data) => Ok(Ok(self.table.push(HeldData { data, cost })?)),
            Err(e) => {
                self.memory.release(cost);
                Ok(Err(e))
            }
        }
    }

    fn byte_size(&mut self, handle: Resource<HeldData>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&handle)?.data.len() as u64)
    }

    fn share(&mut self, handle: Resource<HeldData>) -> wasmtime::Result<Resource<HeldData>> {
        let data = self.table.get(&handle)?.data.clone();
        self.hold(data)
    }

    fn drop(&mut self, handle: Resource<HeldData>) -> wasmtime::Result<()> {
        self.take_back(handle).map(drop)
    }
}
