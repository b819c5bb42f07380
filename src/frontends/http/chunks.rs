//! A response body made of several buffers sent one after another, so that a binary response's output
//! tensors go out from the buffers the backend produced instead of being copied into one. hyper writes the
//! queued buffers with one vectored write.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

pub struct Chunks {
    chunks: VecDeque<Bytes>,
    remaining: u64,
}

impl Chunks {
    pub fn new(chunks: impl IntoIterator<Item = Bytes>) -> Self {
        let chunks: VecDeque<Bytes> = chunks.into_iter().filter(|c| !c.is_empty()).collect();
        let remaining = chunks.iter().map(|c| c.len() as u64).sum();
        Chunks { chunks, remaining }
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let chunk = this.chunks.pop_front();
        if let Some(chunk) = &chunk {
            this.remaining -= chunk.len() as u64;
        }
        Poll::Ready(chunk.map(|c| Ok(Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn sends_every_chunk_in_order_with_an_exact_length() {
        let body = Chunks::new([Bytes::from_static(b"head"), Bytes::new(), Bytes::from_static(b"tail")]);
        assert_eq!(body.size_hint().exact(), Some(8));
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"headtail");
    }
}
