//! The middle layer of tests: the real service, scheduler and both frontends in this process, over a model
//! table of test backends written here (echo, slow, panicking), driven over raw HTTP/1.1 and raw gRPC
//! (HTTP/2 frames carrying prost messages) on ports the system picks. A change to a frontend or to the
//! scheduler can be checked with `cargo test` alone; the Python suite, which drives the real binary with
//! the real clients, stays the compatibility contract.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use tessera::backends::{Instance, NativePlaces, Peers, Runtimes};
use tessera::executor::connections::ConnectionLimits;
use tessera::frontends::{grpc, http};
use tessera::inference::InferenceRequest;
use tessera::model_config::{self, ModelConfig};
use tessera::observability::logging::{Levels, Log, LogFormat};
use tessera::observability::metrics::Metrics;
use tessera::proto::inference as pb;
use tessera::repository::{ControlMode, Loader, ModelControl, ModelRecord, ModelRepository, ModelVersion};
use tessera::service::{HttpLimits, Service, ServiceSettings};
use tessera::tensor::Tensor;
use tessera::Result;

/// Answers every request with its inputs, renamed INPUTn → OUTPUTn.
struct Echo;

#[async_trait]
impl Instance for Echo {
    async fn execute(&mut self, requests: Vec<InferenceRequest>) -> Vec<Result<Vec<Tensor>>> {
        requests.into_iter().map(|r| Ok(r.inputs.into_iter().map(echoed).collect())).collect()
    }
}

fn echoed(tensor: Tensor) -> Tensor {
    Tensor { name: tensor.name.replace("INPUT", "OUTPUT"), ..tensor }
}

/// Echoes after a pause, counting the calls under way at once.
struct Slow {
    pause: Duration,
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

#[async_trait]
impl Instance for Slow {
    async fn execute(&mut self, requests: Vec<InferenceRequest>) -> Vec<Result<Vec<Tensor>>> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.pause).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        Echo.execute(requests).await
    }
}

/// A backend with a bug.
struct Panicking;

#[async_trait]
impl Instance for Panicking {
    async fn execute(&mut self, _: Vec<InferenceRequest>) -> Vec<Result<Vec<Tensor>>> {
        panic!("a bug in a backend")
    }
}

/// An INT32 [-1] → [-1] model config without batching, normalised as a load would.
fn config(name: &str) -> Arc<ModelConfig> {
    let text = format!(
        "name: \"{name}\" backend: \"wasm\"
         input [ {{ name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] }} ]
         output [ {{ name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] }} ]"
    );
    let mut config = model_config::parse_text(&text, name).expect("a valid config");
    model_config::normalise(&mut config, name);
    Arc::new(config)
}

/// The server in this process: its addresses, and the signal that stops it.
struct TestServer {
    http: SocketAddr,
    grpc: SocketAddr,
    stop: watch::Sender<bool>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Serves `models` (each a name and its instances) in explicit model control mode, with no repository
/// directory: the models are put in the table directly.
async fn serve(models: Vec<(&str, Vec<Box<dyn Instance>>)>) -> TestServer {
    let runtime = tokio::runtime::Handle::current();
    let metrics = Metrics::new();
    let repository = Arc::new(ModelRepository::default());
    for (name, instances) in models {
        let config = config(name);
        let version = ModelVersion::with_instances(&runtime, &metrics, config.clone(), 1, instances).unwrap();
        repository.put(ModelRecord::serving(std::path::Path::new(""), config, [Arc::new(version)]));
    }
    let runtimes = Runtimes::new(None, Peers::default(), NativePlaces::default(), true).unwrap();
    let loader = Loader { runtime, runtimes, metrics: Arc::new(metrics), config_name: None, cache: None };
    let control = Arc::new(ModelControl::new(ControlMode::Explicit, Vec::new(), loader, repository.clone(), 4));
    let limits = HttpLimits {
        max_input_size: 1 << 20,
        header_timeout: Duration::from_secs(5),
        body_timeout: Duration::from_secs(5),
    };
    let log = Arc::new(
        Log::start(Levels { info: false, warning: true, error: true, verbose: 0 }, LogFormat::Default, None).unwrap(),
    );
    let settings = ServiceSettings {
        id: "triton".into(),
        strict_readiness: true,
        http_limits: limits,
        log,
        allow_client_shm: false,
    };
    let service = Arc::new(Service::new(repository, control, settings));
    let (stop, stopped) = watch::channel(false);
    let until_stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let connections = ConnectionLimits::new(64, Duration::from_secs(5));
    let http_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (http, grpc) = (http_listener.local_addr().unwrap(), grpc_listener.local_addr().unwrap());
    tokio::spawn(http::serve(
        http_listener,
        service.clone(),
        connections.clone(),
        Default::default(),
        until_stopped(stopped.clone()),
    ));
    tokio::spawn(grpc::serve(grpc_listener, service, connections, Default::default(), until_stopped(stopped)));
    TestServer { http, grpc, stop }
}

/// One HTTP/1.1 request on a connection of its own; returns the status and the body as JSON (Null when
/// the body is empty).
async fn http_call(address: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let stream = TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(body))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let json = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
    (status, json)
}

/// One unary gRPC call of `GRPCInferenceService/<method>` on a connection of its own: the message framed as
/// gRPC frames it, over HTTP/2. Returns the answer, or the grpc-status code and message.
async fn grpc_call<Q: Message, A: Message + Default>(
    server: &TestServer,
    method: &str,
    message: &Q,
) -> std::result::Result<A, (i32, String)> {
    let stream = TcpStream::connect(server.grpc).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let mut frame = BytesMut::new();
    frame.put_u8(0);
    frame.put_u32(message.encoded_len() as u32);
    message.encode(&mut frame).unwrap();
    let request = Request::builder()
        .method("POST")
        .uri(format!("http://localhost/inference.GRPCInferenceService/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(frame.freeze()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let headers = response.headers().clone();
    let collected = response.into_body().collect().await.unwrap();
    // The status is in the trailers, or (an error answered before any message: "trailers-only") in the
    // headers.
    let status = collected.trailers().filter(|t| t.contains_key("grpc-status")).cloned().unwrap_or(headers);
    let status = tonic::Status::from_header_map(&status).expect("a grpc-status");
    if status.code() != tonic::Code::Ok {
        return Err((status.code() as i32, status.message().to_string()));
    }
    let mut body = collected.to_bytes();
    body.advance(5);
    Ok(A::decode(body).unwrap())
}

fn infer_body(values: &[i32]) -> Value {
    json!({"inputs": [{"name": "INPUT0", "shape": [values.len()], "datatype": "INT32", "data": values}]})
}

fn grpc_infer(model: &str, values: &[i32]) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: model.into(),
        inputs: vec![pb::model_infer_request::InferInputTensor {
            name: "INPUT0".into(),
            datatype: "INT32".into(),
            shape: vec![values.len() as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into()],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_serves_health_metadata_inference_and_statistics() {
    let server = serve(vec![("echo", vec![Box::new(Echo)])]).await;
    assert_eq!(http_call(server.http, "GET", "/v2/health/ready", None).await.0, 200);
    let (status, metadata) = http_call(server.http, "GET", "/v2/models/echo", None).await;
    assert_eq!(status, 200);
    assert_eq!(metadata["inputs"][0], json!({"name": "INPUT0", "datatype": "INT32", "shape": [-1]}));
    for _ in 0..3 {
        let (status, answer) =
            http_call(server.http, "POST", "/v2/models/echo/infer", Some(infer_body(&[1, 2, 3]))).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["outputs"][0]["name"], "OUTPUT0");
        assert_eq!(answer["outputs"][0]["data"], json!([1, 2, 3]));
    }
    let (_, stats) = http_call(server.http, "GET", "/v2/models/echo/stats", None).await;
    assert_eq!(stats["model_stats"][0]["inference_stats"]["success"]["count"], 3);
    let (status, error) = http_call(server.http, "POST", "/v2/models/nope/infer", Some(infer_body(&[1]))).await;
    assert_eq!(status, 404);
    assert!(error["error"].as_str().unwrap().contains("nope"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_serves_metadata_and_inference_with_triton_status_codes() {
    let server = serve(vec![("echo", vec![Box::new(Echo)])]).await;
    let metadata: pb::ModelMetadataResponse =
        grpc_call(&server, "ModelMetadata", &pb::ModelMetadataRequest { name: "echo".into(), version: String::new() })
            .await
            .unwrap();
    assert_eq!(metadata.versions, vec!["1"]);
    let answer: pb::ModelInferResponse = grpc_call(&server, "ModelInfer", &grpc_infer("echo", &[7, 8])).await.unwrap();
    assert_eq!(answer.outputs[0].name, "OUTPUT0");
    assert_eq!(&answer.raw_output_contents[0][..], [7, 0, 0, 0, 8, 0, 0, 0]);
    let missing = grpc_call::<_, pb::ModelInferResponse>(&server, "ModelInfer", &grpc_infer("nope", &[1])).await;
    assert_eq!(missing.unwrap_err().0, tonic::Code::NotFound as i32);
    let mut wrong = grpc_infer("echo", &[1]);
    wrong.inputs[0].datatype = "FP32".into();
    let (code, message) = grpc_call::<_, pb::ModelInferResponse>(&server, "ModelInfer", &wrong).await.unwrap_err();
    assert_eq!(code, tonic::Code::InvalidArgument as i32);
    assert!(message.contains("FP32"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_backend_fails_its_requests_and_nothing_else() {
    let server = serve(vec![("echo", vec![Box::new(Echo)]), ("buggy", vec![Box::new(Panicking)])]).await;
    let (status, error) = http_call(server.http, "POST", "/v2/models/buggy/infer", Some(infer_body(&[1]))).await;
    assert_eq!(status, 500);
    assert!(error["error"].as_str().unwrap().contains("a bug in a backend"), "{error}");
    // Its one instance is retired, so the next request is refused as unavailable, not hung.
    let (code, _) =
        grpc_call::<_, pb::ModelInferResponse>(&server, "ModelInfer", &grpc_infer("buggy", &[1])).await.unwrap_err();
    assert_eq!(code, tonic::Code::Unavailable as i32);
    let (status, _) = http_call(server.http, "POST", "/v2/models/echo/infer", Some(infer_body(&[1]))).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_queue_for_the_instances_of_a_model_and_run_in_parallel_across_them() {
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let slow = |running: &Arc<AtomicUsize>, most: &Arc<AtomicUsize>| -> Box<dyn Instance> {
        Box::new(Slow { pause: Duration::from_millis(200), running: running.clone(), most: most.clone() })
    };
    let server = serve(vec![("slow", vec![slow(&running, &most), slow(&running, &most)])]).await;
    let started = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..4 {
        let address = server.http;
        calls.spawn(async move { http_call(address, "POST", "/v2/models/slow/infer", Some(infer_body(&[i]))).await });
    }
    while let Some(answer) = calls.join_next().await {
        assert_eq!(answer.unwrap().0, 200);
    }
    // Two instances, four calls of 200 ms: two rounds, never more than two at once.
    assert_eq!(most.load(Ordering::SeqCst), 2);
    assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unloading_over_the_repository_api_finishes_the_model() {
    let server = serve(vec![("echo", vec![Box::new(Echo)])]).await;
    let (status, index) = http_call(server.http, "POST", "/v2/repository/index", None).await;
    assert_eq!(status, 200);
    assert_eq!(index, json!([{"name": "echo", "version": "1", "state": "READY"}]));
    assert_eq!(http_call(server.http, "POST", "/v2/repository/models/echo/unload", None).await.0, 200);
    let (status, error) = http_call(server.http, "POST", "/v2/models/echo/infer", Some(infer_body(&[1]))).await;
    assert_eq!(status, 400);
    assert!(error["error"].as_str().unwrap().contains("unloaded"), "{error}");
    let (code, _) = grpc_call::<_, pb::RepositoryModelLoadResponse>(
        &server,
        "RepositoryModelLoad",
        &pb::RepositoryModelLoadRequest { model_name: "../x".into(), ..Default::default() },
    )
    .await
    .unwrap_err();
    assert_eq!(code, tonic::Code::InvalidArgument as i32);
}
