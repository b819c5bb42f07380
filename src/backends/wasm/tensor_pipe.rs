//! Tensor bytes through a plugin's standard input and output (`tensor-data.to-stdin`, `expect-stdout`,
//! `from-stdout`). A guest whose writes pass its own buffer (CPython's `os.write` through wasi-libc) hands a
//! large tensor out this way without the copy its bindings would make of a `list<u8>` (and, in
//! componentize-py 0.25, leak). A read lands in a buffer of wasi-libc's, which copies it on into the
//! guest's own; stdin gives at most 256 KiB a read so that this buffer is still in cache for that copy,
//! where a `list<u8>` of the whole tensor is written out to memory first.
//!
//! Each instance has one pipe, shared by its store (which stages and collects) and its stdin and stdout
//! streams (which the guest reads and writes). The store's memory cap is charged for a collection by the
//! store; the streams only move bytes.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use wasmtime_wasi::cli::{IsTerminal, StdinStream};
use wasmtime_wasi::p2::{InputStream, Pollable, StreamError, StreamResult};

/// One instance's pipe; clones share it.
#[derive(Clone, Default)]
pub struct TensorPipe {
    state: Arc<Mutex<PipeState>>,
}

#[derive(Default)]
struct PipeState {
    /// What stdin has left to give, read from the front.
    staged: Bytes,
    /// The stdout collection under way.
    collecting: Option<Collection>,
}

struct Collection {
    expected: usize,
    received: Received,
    /// What it was charged against the memory cap.
    cost: usize,
}

/// What a collection has received. A tensor written in one write (the stream allows a write of all that is
/// still wanted) is kept in the buffer wasmtime lifted it into; pieces are copied into one buffer of the
/// expected size, so that many small writes cost the host no more than the collection was charged.
enum Received {
    Whole(Bytes),
    Copied(BytesMut),
}

impl Collection {
    fn received(&self) -> usize {
        match &self.received {
            Received::Whole(bytes) => bytes.len(),
            Received::Copied(buffer) => buffer.len(),
        }
    }

    fn wanted(&self) -> usize {
        self.expected - self.received()
    }

    fn add(&mut self, piece: Bytes) {
        match &mut self.received {
            Received::Copied(buffer) if buffer.is_empty() && piece.len() == self.expected => {
                self.received = Received::Whole(piece);
            }
            Received::Copied(buffer) => {
                buffer.reserve(self.expected - buffer.len());
                buffer.extend_from_slice(&piece);
            }
            Received::Whole(_) => unreachable!("a whole collection wants nothing more"),
        }
    }
}

impl TensorPipe {
    fn lock(&self) -> MutexGuard<'_, PipeState> {
        // Nothing panics while holding the lock; a poisoned one still holds consistent bytes.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes `data` what stdin reads next.
    pub fn stage(&self, data: Bytes) {
        self.lock().staged = data;
    }

    /// Starts collecting `expected` bytes of stdout, charged `cost`; the cost of a collection it replaces.
    pub fn expect(&self, expected: usize, cost: usize) -> Option<usize> {
        let collection = Collection { expected, received: Received::Copied(BytesMut::new()), cost };
        self.lock().collecting.replace(collection).map(|dropped| dropped.cost)
    }

    /// Ends the collection: its bytes if they all came, and its cost either way (`None`: nothing expected).
    pub fn collected(&self) -> Option<(Result<Bytes, String>, usize)> {
        let collection = self.lock().collecting.take()?;
        let received = collection.received();
        let bytes = match collection.received {
            _ if received != collection.expected => {
                Err(format!("from-stdout: {received} bytes were written to stdout, {} expected", collection.expected))
            }
            Received::Whole(bytes) => Ok(bytes),
            Received::Copied(buffer) => Ok(buffer.freeze()),
        };
        Some((bytes, collection.cost))
    }

    /// Drops a staged tensor not read and a collection not taken; the collection's cost, if there was one.
    pub fn clear(&self) -> Option<usize> {
        let mut state = self.lock();
        state.staged = Bytes::new();
        state.collecting.take().map(|dropped| dropped.cost)
    }

    /// Takes what a collection under way still wants from a write to stdout; the rest is left for the log.
    pub fn divert(&self, mut bytes: Bytes) -> Bytes {
        let mut state = self.lock();
        let Some(collection) = state.collecting.as_mut() else { return bytes };
        let wanted = collection.wanted().min(bytes.len());
        if wanted > 0 {
            collection.add(bytes.split_to(wanted));
        }
        bytes
    }

    /// How many bytes the collection under way still wants (0: none is).
    pub fn wanted(&self) -> usize {
        self.lock().collecting.as_ref().map_or(0, Collection::wanted)
    }
}

/// The most one read of stdin gives.
const READ_PIECE: usize = 256 << 10;

/// The guest's stdin: whatever was last staged, then the end of the input.
pub struct StagedInput(pub TensorPipe);

impl IsTerminal for StagedInput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdinStream for StagedInput {
    fn p2_stream(&self) -> Box<dyn InputStream> {
        Box::new(StagedReader(self.0.clone()))
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncRead + Send + Sync> {
        // Only WASIp3 guests ask for this; plugins target WASIp2.
        Box::new(tokio::io::empty())
    }
}

struct StagedReader(TensorPipe);

impl InputStream for StagedReader {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        let mut state = self.0.lock();
        if state.staged.is_empty() {
            // The end, not "nothing yet": a read that waited would wait forever.
            return Err(StreamError::Closed);
        }
        // wasmtime lowers each piece into a list the guest allocates, which wasi-libc then copies into the
        // reader's buffer: in pieces this small, that list is still in cache when it is copied again.
        let size = size.min(READ_PIECE);
        if size >= state.staged.len() {
            // All of it: nothing left holds the tensor's buffer (an empty slice of it still would).
            return Ok(std::mem::take(&mut state.staged));
        }
        Ok(state.staged.split_to(size))
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for StagedReader {
    async fn ready(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdin_gives_what_was_staged_then_the_end() {
        let pipe = TensorPipe::default();
        let mut reader = StagedReader(pipe.clone());
        assert!(matches!(reader.read(10), Err(StreamError::Closed)));
        pipe.stage(Bytes::from_static(b"abcdef"));
        assert_eq!(reader.read(4).unwrap(), "abcd");
        pipe.stage(Bytes::from_static(b"xyz"));
        assert_eq!(reader.read(10).unwrap(), "xyz", "a new tensor replaces what was left");
        assert!(matches!(reader.read(10), Err(StreamError::Closed)));
    }

    #[test]
    fn stdout_is_collected_up_to_what_was_expected_and_the_rest_is_left() {
        let pipe = TensorPipe::default();
        assert_eq!(pipe.divert(Bytes::from_static(b"log line\n")), "log line\n");
        assert_eq!(pipe.expect(5, 7), None);
        assert_eq!(pipe.divert(Bytes::from_static(b"abc")), "");
        assert_eq!(pipe.divert(Bytes::from_static(b"defg\n")), "fg\n");
        let (bytes, cost) = pipe.collected().unwrap();
        assert_eq!((bytes.unwrap(), cost), (Bytes::from_static(b"abcde"), 7));
        assert!(pipe.collected().is_none(), "taken once");
        assert_eq!(pipe.divert(Bytes::from_static(b"x")), "x");
    }

    #[test]
    fn a_tensor_written_in_one_write_is_taken_without_a_copy() {
        let pipe = TensorPipe::default();
        assert_eq!(pipe.wanted(), 0);
        pipe.expect(6, 6);
        assert_eq!(pipe.wanted(), 6);
        let written = Bytes::from(b"tensorlog\n".to_vec());
        let at = written.as_ptr();
        assert_eq!(pipe.divert(written), "log\n");
        assert_eq!(pipe.wanted(), 0);
        let (bytes, _) = pipe.collected().unwrap();
        let bytes = bytes.unwrap();
        assert_eq!((&bytes[..], bytes.as_ptr()), (&b"tensor"[..], at), "the write's own buffer");
    }

    #[test]
    fn a_tensor_in_many_small_writes_is_copied_into_one_buffer() {
        let pipe = TensorPipe::default();
        pipe.expect(1000, 1000);
        for i in 0..1000u32 {
            assert_eq!(pipe.divert(Bytes::from(vec![(i % 251) as u8])), "");
        }
        let state = pipe.lock();
        let Some(Collection { received: Received::Copied(buffer), .. }) = &state.collecting else {
            panic!("pieces are copied")
        };
        assert_eq!(buffer.capacity(), 1000, "one buffer of the expected size, whatever the writes");
        drop(state);
        let (bytes, _) = pipe.collected().unwrap();
        assert!(bytes.unwrap().iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    }

    #[test]
    fn a_short_collection_is_an_error_and_a_new_one_or_the_calls_end_returns_the_old_cost() {
        let pipe = TensorPipe::default();
        pipe.expect(4, 1);
        assert_eq!(pipe.expect(3, 2), Some(1));
        pipe.divert(Bytes::from_static(b"ab"));
        let (bytes, cost) = pipe.collected().unwrap();
        assert_eq!(bytes.unwrap_err(), "from-stdout: 2 bytes were written to stdout, 3 expected");
        assert_eq!(cost, 2);
        pipe.expect(3, 5);
        pipe.stage(Bytes::from_static(b"left"));
        assert_eq!(pipe.clear(), Some(5));
        assert!(pipe.collected().is_none());
        assert!(matches!(StagedReader(pipe).read(4), Err(StreamError::Closed)));
    }
}
