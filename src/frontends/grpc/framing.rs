//! Request bodies handed to tonic one whole gRPC message at a time. A gRPC message starts with a 5-byte
//! prefix (a compression flag and a big-endian length); tonic reserves the length the prefix states as soon
//! as it reads it, before any of the message has arrived. So a client could open many streams, send each a
//! prefix claiming the 2 GiB limit and a few bytes, and make the server commit memory it never sends. Held
//! back here until its last byte has arrived, a message costs the server what the client actually sent.
//!
//! A prefix claiming more than the message size limit goes on at once, for tonic to refuse.
//!
//! Nothing is copied: a message's chunks are queued as the `Bytes` hyper gave, split where a message ends
//! inside a chunk. A body that ends in the middle of a message passes the incomplete rest on, so that tonic
//! answers it with its own error.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// The compression flag and the length before each gRPC message.
const PREFIX: usize = 5;

pub struct WholeMessages<B> {
    inner: B,
    /// The largest message tonic accepts.
    limit: usize,
    /// Chunks of the message still arriving.
    partial: VecDeque<Bytes>,
    partial_len: usize,
    /// Chunks of whole messages, to hand on.
    whole: VecDeque<Bytes>,
    /// Trailers (or the end), held until the messages before them are handed on.
    finished: Option<Option<Frame<Bytes>>>,
}

impl<B> WholeMessages<B> {
    pub fn new(inner: B, limit: usize) -> Self {
        WholeMessages { inner, limit, partial: VecDeque::new(), partial_len: 0, whole: VecDeque::new(), finished: None }
    }

    fn take_chunk(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.partial_len += data.len();
            self.partial.push_back(data);
        }
        while let Some(length) = self.next_length() {
            match length {
                Some(length) => self.move_whole(length),
                None => return self.flush_partial(),
            }
        }
    }

    /// Whether the message at the front of `partial` can go on: `Some(Some(length))` (prefix included) when
    /// all of it has arrived, `Some(None)` when its prefix claims more than the limit (all goes on, for
    /// tonic to refuse), `None` while more must arrive.
    fn next_length(&self) -> Option<Option<usize>> {
        if self.partial_len < PREFIX {
            return None;
        }
        let prefix: Vec<u8> = self.partial.iter().flat_map(|chunk| chunk.iter().copied()).take(PREFIX).collect();
        match message_length(&prefix, self.limit) {
            Some(length) => (self.partial_len >= length).then_some(Some(length)),
            None => Some(None),
        }
    }

    /// Moves the first `length` bytes of `partial` to `whole`, splitting the chunk a message ends inside.
    fn move_whole(&mut self, mut length: usize) {
        self.partial_len -= length;
        while length > 0 {
            let mut chunk = self.partial.pop_front().expect("partial holds the message");
            if chunk.len() > length {
                self.partial.push_front(chunk.split_off(length));
            }
            length -= chunk.len();
            self.whole.push_back(chunk);
        }
    }

    /// At the body's end, an incomplete message goes on as it is (tonic reports it).
    fn flush_partial(&mut self) {
        self.whole.extend(self.partial.drain(..));
        self.partial_len = 0;
    }
}

/// The length, prefix included, of the message `prefix` starts; `None` when it claims more than `limit`.
fn message_length(prefix: &[u8], limit: usize) -> Option<usize> {
    let body = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    (body <= limit).then_some(PREFIX + body)
}

/// How many bytes at the start of `chunk` are whole messages (all of it once a prefix claims more than
/// `limit`, which goes on for tonic to refuse).
fn whole_messages_in(chunk: &[u8], limit: usize) -> usize {
    let mut end = 0;
    while let Some(prefix) = chunk.get(end..end + PREFIX) {
        match message_length(prefix, limit) {
            None => return chunk.len(),
            Some(length) if end + length <= chunk.len() => end += length,
            Some(_) => break,
        }
    }
    end
}

impl<B> Body for WholeMessages<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        loop {
            if let Some(chunk) = this.whole.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            if let Some(finished) = this.finished.take() {
                return Poll::Ready(finished.map(Ok));
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        // The common case, a chunk of whole messages and nothing before it, goes on as it is.
                        if this.partial.is_empty() && whole_messages_in(&data, this.limit) == data.len() {
                            return Poll::Ready(Some(Ok(Frame::data(data))));
                        }
                        this.take_chunk(data);
                    }
                    Err(trailers) => {
                        this.flush_partial();
                        this.finished = Some(Some(trailers));
                    }
                },
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => {
                    this.flush_partial();
                    this.finished = Some(None);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.whole.is_empty() && self.partial.is_empty() && self.finished.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    fn message(body: &[u8]) -> Vec<u8> {
        let mut framed = vec![0];
        framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
        framed.extend_from_slice(body);
        framed
    }

    /// The chunks the adapter hands on for a body arriving as `chunks`.
    fn handed_on(chunks: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let frames = chunks.into_iter().map(|c| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(c))));
        let body = WholeMessages::new(StreamBody::new(futures_util::stream::iter(frames)), 1 << 20);
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        runtime.block_on(async {
            let mut body = body;
            let mut out = Vec::new();
            while let Some(frame) = body.frame().await {
                out.push(frame.expect("no error").into_data().expect("data").to_vec());
            }
            out
        })
    }

    #[test]
    fn a_message_is_handed_on_only_once_all_of_it_has_arrived() {
        let whole = message(b"hello");
        // Prefix split across chunks, body split too: nothing goes on before the last byte.
        let chunks = vec![whole[..2].to_vec(), whole[2..7].to_vec(), whole[7..].to_vec()];
        let out = handed_on(chunks);
        assert_eq!(out.concat(), whole);
    }

    #[test]
    fn messages_sharing_a_chunk_are_split_where_they_end() {
        let (a, b) = (message(b"first"), message(b""));
        let c = message(b"third one");
        let joined = [a.clone(), b.clone(), c[..3].to_vec()].concat();
        let out = handed_on(vec![joined, c[3..].to_vec()]);
        assert_eq!(out, vec![a, b, c[..3].to_vec(), c[3..].to_vec()]);
    }

    #[test]
    fn an_incomplete_message_at_the_end_is_handed_on_as_it_is() {
        let claim = [0, 0, 0, 1, 0, 1, 2];
        assert_eq!(handed_on(vec![claim.to_vec()]).concat(), claim);
    }

    #[test]
    fn a_prefix_claiming_more_than_the_limit_goes_on_at_once() {
        let claim = vec![0, 0x7f, 0xff, 0xff, 0xff, 1, 2];
        assert_eq!(handed_on(vec![claim.clone(), vec![3]]), vec![claim, vec![3]]);
    }
}
