//! The frontends' part of a trace: when a traced request's head arrived and its body was read
//! (`HTTP_RECV_*`, `GRPC_WAITREAD_*`), when its answer was complete (`INFER_RESPONSE_COMPLETE`), and when
//! the response started and finished going out (`*_SEND_START`, `*_SEND_END`).
//!
//! Both servers put one layer (`layer`) around their router: while any scope traces it notes each
//! request's arrival in the request's extensions, and it sends a traced response's body through
//! `TracedBody`, which notes when the body has gone. With tracing off the layer costs a request one atomic
//! load and one empty extension lookup (it wraps the whole router, not each route, which would box every
//! call once more). On a gRPC stream, `arrivals` notes when each message was waited for and came, and `sending`
//! when a request's responses started to leave and when the last had gone.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::http::{self, HeaderMap};
use axum::response::Response;
use bytes::Bytes;
use futures_util::stream::{self, BoxStream};
use futures_util::{future, Stream, StreamExt};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tower::layer::util::Stack;
use tower::util::{MapRequestLayer, MapResponseLayer};

use crate::observability::trace::{tracer, Trace};

/// When a request's head arrived, and when its body had been read (HTTP reads it before the handler).
#[derive(Clone, Copy)]
pub struct Arrived {
    pub head: Instant,
    pub body: Option<Instant>,
}

/// The wire a traced request came on, naming its timestamps.
#[derive(Clone, Copy)]
pub enum Wire {
    Http,
    Grpc,
}

impl Wire {
    fn names(self) -> [&'static str; 4] {
        match self {
            Wire::Http => ["HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"],
            Wire::Grpc => ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "GRPC_SEND_START", "GRPC_SEND_END"],
        }
    }
}

/// A response's trace, put in the response's extensions by the handler for the layer to finish.
#[derive(Clone)]
pub struct Sending {
    trace: Trace,
    wire: Wire,
}

type Layer<B> =
    Stack<MapRequestLayer<fn(http::Request<B>) -> http::Request<B>>, MapResponseLayer<fn(Response) -> Response>>;

/// The layer around both routers (`B`: the server's request body).
pub fn layer<B>() -> Layer<B> {
    let note: fn(http::Request<B>) -> http::Request<B> = note_arrival;
    Stack::new(MapRequestLayer::new(note), MapResponseLayer::new(send_traced as _))
}

fn note_arrival<B>(mut request: http::Request<B>) -> http::Request<B> {
    if tracer().is_on() {
        request.extensions_mut().insert(Arrived { head: Instant::now(), body: None });
    }
    request
}

/// Sends a traced response's body through `TracedBody`, noting the send's start now.
fn send_traced(mut response: Response) -> Response {
    let Some(Sending { trace, wire }) = response.extensions_mut().remove::<Sending>() else {
        return response;
    };
    let [.., send_start, send_end] = wire.names();
    trace.frontend(send_start, Instant::now());
    response.map(|inner| Body::new(TracedBody { inner, trace, send_end }))
}

/// Samples a client's request to `model` for tracing, and notes its arrival. `arrived` is the layer's note
/// (absent when tracing was turned on while the request was on its way: it then counts from now).
pub fn sample(model: &str, headers: &HeaderMap, arrived: Option<Arrived>, wire: Wire) -> Option<Trace> {
    if !tracer().is_on() {
        return None;
    }
    let now = Instant::now();
    let arrived = arrived.unwrap_or(Arrived { head: now, body: None });
    let trace = tracer().sample(model, headers, arrived.head)?;
    let [recv_start, recv_end, ..] = wire.names();
    trace.frontend(recv_start, arrived.head);
    trace.frontend(recv_end, arrived.body.unwrap_or(now));
    Some(trace)
}

/// Notes that the request's answer is complete.
pub fn answered(trace: &Option<Trace>) {
    if let Some(trace) = trace {
        trace.frontend("INFER_RESPONSE_COMPLETE", Instant::now());
    }
}

/// Hands the trace to the layer in the response's `extensions`, to note the response's sending.
pub fn send_with(trace: Option<Trace>, wire: Wire, extensions: &mut axum::http::Extensions) {
    if let Some(trace) = trace {
        extensions.insert(Sending { trace, wire });
    }
}

/// The messages of a request stream, each with when the server started waiting for it and when it came
/// (noted while any scope traces).
pub fn arrivals<S: Stream + Unpin>(messages: S) -> impl Stream<Item = (S::Item, Option<Arrived>)> {
    Arrivals { messages, waiting_since: None }
}

struct Arrivals<S> {
    messages: S,
    waiting_since: Option<Instant>,
}

impl<S: Stream + Unpin> Stream for Arrivals<S> {
    type Item = (S::Item, Option<Arrived>);

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let on = tracer().is_on();
        if on && self.waiting_since.is_none() {
            self.waiting_since = Some(Instant::now());
        }
        let polled = Pin::new(&mut self.messages).poll_next(cx);
        polled.map(|message| {
            let head = self.waiting_since.take();
            let arrived = head.filter(|_| on).map(|head| Arrived { head, body: Some(Instant::now()) });
            message.map(|message| (message, arrived))
        })
    }
}

/// A request's response messages on a gRPC stream, noting for its trace when the first is taken to be sent
/// (`GRPC_SEND_START`) and when the stream comes back after the last, which it has then sent
/// (`GRPC_SEND_END`).
pub fn sending<T: Send + 'static>(messages: BoxStream<'static, T>, trace: Option<Trace>) -> BoxStream<'static, T> {
    let Some(trace) = trace else { return messages };
    let starting = trace.clone();
    let mut first = true;
    let ended = stream::once(async move { trace.frontend("GRPC_SEND_END", Instant::now()) });
    messages
        .inspect(move |_| {
            if std::mem::take(&mut first) {
                starting.frontend("GRPC_SEND_START", Instant::now());
            }
        })
        .chain(ended.filter_map(|()| future::ready(None)))
        .boxed()
}

/// A response body that notes when it has gone out: when hyper lets it go, after writing it all (or when
/// the client went away).
struct TracedBody {
    inner: Body,
    trace: Trace,
    send_end: &'static str,
}

impl HttpBody for TracedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TracedBody {
    fn drop(&mut self) {
        self.trace.frontend(self.send_end, Instant::now());
    }
}
