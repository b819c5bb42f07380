//! The gRPC floor: a `GRPCInferenceService` that does no work, so that perf_analyzer against it measures
//! what the client, loopback and HTTP/2 cost on their own — the gRPC twin of `floor.rs`. It answers every
//! call from messages recorded from a real server (bench/harness.py records them from Tessera), and counts
//! the inferences it served so that the statistics perf_analyzer reads before and after a window add up.
//!
//! HTTP/2 is not something to write by hand, so the floor runs on the transport Tessera runs on: hyper's
//! HTTP/2 under Tessera's own executor (its runtime with busy polling, its accept loop, each call run in
//! place first). What it leaves out is everything Tessera does per call: no protobuf decoding of the
//! request (its body is only collected), no routing beyond a match on the path, no service, scheduler or
//! model, no encoding of the answer (the recorded bytes go out as they are). Tessera's p50 minus this
//! floor's is then what Tessera's own work costs a gRPC call. A measuring stick, never a server.
//!
//!   floor_grpc PORT MODEL DIR    DIR holds `metadata`, `config` and `infer`: the serialized
//!                                ModelMetadataResponse, ModelConfigResponse and ModelInferResponse

#[path = "floor_answers.rs"]
mod floor_answers;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::server::conn::http2;
use hyper::{Request, Response};
use hyper_util::rt::TokioTimer;
use prost::Message;
use tessera::executor::connections::{self, ConnectionLimits, Opening};
use tessera::executor::InlineFirst;
use tessera::proto::inference::{
    InferBatchStatistics, InferStatistics, ModelReadyResponse, ModelStatistics, ModelStatisticsResponse,
    ServerLiveResponse, ServerMetadataResponse, ServerReadyResponse, StatisticDuration,
};

/// Tessera's default busy-polling budget (`--busy-poll-us`), for the same reason `floor.rs` spins.
const BUSY_POLL: Duration = Duration::from_micros(100);

struct Answers {
    metadata: Bytes,
    config: Bytes,
    infer: Bytes,
    model: String,
    served: AtomicU64,
}

type Body =
    http_body_util::combinators::WithTrailers<Full<Bytes>, std::future::Ready<Option<Result<HeaderMap, Infallible>>>>;

fn main() -> std::io::Result<()> {
    let (port, recorded) = floor_answers::from_command_line("floor_grpc");
    let answers = Arc::new(Answers {
        metadata: recorded.metadata.into(),
        config: recorded.config.into(),
        infer: recorded.infer.into(),
        model: recorded.model,
        served: AtomicU64::new(0),
    });
    tessera::executor::runtime(BUSY_POLL)?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let mut builder = http2::Builder::new(InlineFirst);
        builder.timer(TokioTimer::new()).max_concurrent_streams(None);
        let limits = ConnectionLimits::new(4096, Duration::from_secs(30));
        let service = hyper::service::service_fn(move |request| call(request, answers.clone()));
        connections::serve(listener, "gRPC floor", Opening::Http2Preface, limits, std::future::pending(), move |io| {
            builder.serve_connection(io, service.clone())
        })
        .await;
        Ok(())
    })
}

/// One call: its body read to the end, then the answer its method gets.
async fn call(request: Request<Incoming>, answers: Arc<Answers>) -> Result<Response<Body>, hyper::Error> {
    let method = request.uri().path().rsplit('/').next().unwrap_or_default().to_string();
    request.into_body().collect().await?;
    let message = match method.as_str() {
        "ModelInfer" => {
            answers.served.fetch_add(1, Ordering::Relaxed);
            answers.infer.clone()
        }
        "ModelMetadata" => answers.metadata.clone(),
        "ModelConfig" => answers.config.clone(),
        "ModelStatistics" => statistics(&answers.model, answers.served.load(Ordering::Relaxed)).encode_to_vec().into(),
        "ServerLive" => ServerLiveResponse { live: true }.encode_to_vec().into(),
        "ServerReady" => ServerReadyResponse { ready: true }.encode_to_vec().into(),
        "ModelReady" => ModelReadyResponse { ready: true }.encode_to_vec().into(),
        "ServerMetadata" => {
            let metadata = ServerMetadataResponse {
                name: "floor".into(),
                version: "0".into(),
                extensions: vec!["statistics".into()],
            };
            metadata.encode_to_vec().into()
        }
        _ => return Ok(answer(Bytes::new(), "12")), // UNIMPLEMENTED
    };
    Ok(answer(length_prefixed(&message), "0"))
}

/// A gRPC response: `body` (zero or more length-prefixed messages), then `grpc-status` in the trailers.
fn answer(body: Bytes, status: &'static str) -> Response<Body> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static(status));
    let mut response = Response::new(Full::new(body).with_trailers(std::future::ready(Some(Ok(trailers)))));
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/grpc"));
    response
}

/// `message` as gRPC frames a message on the wire: an uncompressed flag byte and a big-endian u32 length.
fn length_prefixed(message: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(5 + message.len());
    framed.put_u8(0);
    framed.put_u32(u32::try_from(message.len()).expect("a recorded message under 4 GiB"));
    framed.put_slice(message);
    framed.freeze()
}

/// Statistics in which every served inference succeeded in one execution of 1 µs.
fn statistics(model: &str, served: u64) -> ModelStatisticsResponse {
    let duration = Some(StatisticDuration { count: served, ns: served * 1000 });
    let none = Some(StatisticDuration::default());
    let inference_stats = InferStatistics {
        success: duration,
        fail: none,
        queue: duration,
        compute_input: duration,
        compute_infer: duration,
        compute_output: duration,
        cache_hit: none,
        cache_miss: none,
    };
    let batch = InferBatchStatistics {
        batch_size: 1,
        compute_input: duration,
        compute_infer: duration,
        compute_output: duration,
    };
    ModelStatisticsResponse {
        model_stats: vec![ModelStatistics {
            name: model.into(),
            version: "1".into(),
            inference_count: served,
            execution_count: served,
            inference_stats: Some(inference_stats),
            batch_stats: vec![batch],
            ..Default::default()
        }],
    }
}
