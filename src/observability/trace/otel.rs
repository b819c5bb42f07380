//! The `opentelemetry` trace mode: each sampled request becomes spans exported over OTLP/HTTP (protobuf)
//! by the OpenTelemetry SDK's batch span processor, in the shape Triton gives them. A request that came
//! from a client has an `InferRequest` span for its time in the frontend (events such as
//! `HTTP_RECV_START`, `GRPC_SEND_END`, `INFER_RESPONSE_COMPLETE`); under it, one span named after the
//! model for its time in the server (`REQUEST_START`, `QUEUE_START`, `REQUEST_END`, with the attributes
//! `triton.model_name`, `triton.model_version`, `triton.trace_id`, `triton.trace_parent_id` and
//! `triton.request_id`); under that a `compute` span for the execution (`COMPUTE_START`,
//! `COMPUTE_INPUT_END`, `COMPUTE_OUTPUT_START`, `COMPUTE_END`). A request an ensemble step or a BLS call
//! made has no frontend span: its model span hangs under the model span of the request that made it.
//!
//! A client's W3C `traceparent` header makes the `InferRequest` span a child of the client's span (the
//! trace module samples such requests whatever the rate). Timestamps come from the monotonic clock the
//! triton mode uses, turned into wall-clock time at one anchor.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span as _, SpanContext, SpanKind, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HeaderExtractor, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, Span};
use opentelemetry_sdk::Resource;

/// The exporter's settings, from `--trace-config opentelemetry,<setting>=<value>`; unset batch settings
/// come from the `OTEL_BSP_*` variables, else the SDK's defaults (Triton's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exporter {
    pub url: String,
    /// `key=value` resource attributes, after `service.name=triton-inference-server`.
    pub resource: Vec<(String, String)>,
    pub bsp_max_queue_size: Option<u32>,
    pub bsp_schedule_delay: Option<u32>,
    pub bsp_max_export_batch_size: Option<u32>,
}

impl Default for Exporter {
    fn default() -> Self {
        Exporter {
            url: "http://localhost:4318/v1/traces".into(),
            resource: Vec::new(),
            bsp_max_queue_size: None,
            bsp_schedule_delay: None,
            bsp_max_export_batch_size: None,
        }
    }
}

impl Exporter {
    /// The settings as the trace extension lists them, one string each.
    pub fn options(&self) -> Vec<(&'static str, String)> {
        let mut options = vec![("url", self.url.clone())];
        options.extend(self.resource.iter().map(|(key, value)| ("resource", format!("{key}={value}"))));
        let batch = [
            ("bsp_max_queue_size", self.bsp_max_queue_size),
            ("bsp_schedule_delay", self.bsp_schedule_delay),
            ("bsp_max_export_batch_size", self.bsp_max_export_batch_size),
        ];
        options.extend(batch.into_iter().filter_map(|(key, value)| Some((key, value?.to_string()))));
        options
    }

    /// Checks the batch settings together: a batch larger than the queue could never be filled.
    pub fn check(&self) -> Result<(), String> {
        match (self.bsp_max_export_batch_size, self.bsp_max_queue_size) {
            (Some(batch), Some(queue)) if batch > queue => {
                Err(format!("bsp_max_export_batch_size ({batch}) must not be larger than bsp_max_queue_size ({queue})"))
            }
            _ => Ok(()),
        }
    }

    /// The endpoint as a URL: Triton takes `host:port/path` without a scheme too.
    fn endpoint(&self) -> String {
        match self.url.contains("://") {
            true => self.url.clone(),
            false => format!("http://{}", self.url),
        }
    }
}

/// The running exporter: the provider (kept to flush it at shutdown) and the tracer spans come from.
struct Pipeline {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

static PIPELINE: OnceLock<Pipeline> = OnceLock::new();

/// Starts exporting on `runtime` (which sends the batches). Once per process.
pub fn start(exporter: &Exporter, runtime: tokio::runtime::Handle) -> Result<(), String> {
    let client = RuntimeClient { client: Client::builder(TokioExecutor::new()).build_http(), runtime };
    let span_exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_endpoint(exporter.endpoint())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot set up the OTLP exporter to {}: {e}", exporter.url))?;
    let mut batch = BatchConfigBuilder::default();
    if let Some(size) = exporter.bsp_max_queue_size {
        batch = batch.with_max_queue_size(size as usize);
    }
    if let Some(delay) = exporter.bsp_schedule_delay {
        batch = batch.with_scheduled_delay(Duration::from_millis(u64::from(delay)));
    }
    if let Some(size) = exporter.bsp_max_export_batch_size {
        batch = batch.with_max_export_batch_size(size as usize);
    }
    let processor = BatchSpanProcessor::builder(span_exporter).with_batch_config(batch.build()).build();
    let attributes = std::iter::once(KeyValue::new("service.name", "triton-inference-server"))
        .chain(exporter.resource.iter().map(|(key, value)| KeyValue::new(key.clone(), value.clone())));
    let resource = Resource::builder().with_attributes(attributes).build();
    let provider = SdkTracerProvider::builder().with_span_processor(processor).with_resource(resource).build();
    let tracer = provider.tracer("tessera");
    PIPELINE.set(Pipeline { provider, tracer }).map_err(|_| "the OpenTelemetry exporter is already running".to_string())
}

/// Exports the spans still waiting, at shutdown.
pub fn flush() {
    if let Some(pipeline) = PIPELINE.get() {
        if let Err(e) = pipeline.provider.shutdown() {
            tracing::warn!("exporting the last OpenTelemetry spans failed: {e}");
        }
    }
}

/// How long one export may take before it counts as failed.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The exporter's HTTP client: the SDK's batch processor exports from its own thread, so each request is
/// handed to the server's tokio runtime, where hyper's connection pool lives.
#[derive(Debug)]
struct RuntimeClient {
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
}

#[async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let exchange = async move {
            let (parts, body) = request.into_parts();
            let response = client.request(Request::from_parts(parts, Full::new(body))).await?;
            let (parts, body) = response.into_parts();
            Ok::<_, HttpError>(Response::from_parts(parts, body.collect().await?.to_bytes()))
        };
        let timed = async move {
            tokio::time::timeout(EXPORT_TIMEOUT, exchange).await.map_err(|_| HttpError::from("export timed out"))?
        };
        self.runtime.spawn(timed).await?
    }
}

/// The span context a client sent in its `traceparent` header, if a valid one.
pub fn propagated(headers: &axum::http::HeaderMap) -> Option<SpanContext> {
    let context = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    let span = context.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// The spans of one trace, opened and closed as its events arrive.
pub struct Spans {
    /// The frontend's `InferRequest` span; none for a request made by an ensemble step or a BLS call.
    root: Option<Span>,
    /// What the model span hangs under: the root span, or the model span of the request that made this one.
    parent: Option<SpanContext>,
    model: Option<Span>,
    compute: Option<Span>,
}

impl Spans {
    /// A trace of a client's request, its `InferRequest` span starting `at`, under the client's span if it
    /// sent one.
    pub fn for_client(at: Instant, client: Option<SpanContext>) -> Option<Spans> {
        let tracer = &PIPELINE.get()?.tracer;
        let parent = client.map_or_else(Context::new, |span| Context::new().with_remote_span_context(span));
        let root = tracer
            .span_builder("InferRequest")
            .with_kind(SpanKind::Server)
            .with_start_time(super::wall_clock(at))
            .start_with_context(tracer, &parent);
        let parent = Some(root.span_context().clone());
        Some(Spans { root: Some(root), parent, model: None, compute: None })
    }

    /// A trace of a request made while serving this one: its model span will hang under this one's.
    pub fn for_child(&self) -> Spans {
        let parent = self.model.as_ref().map(|span| span.span_context().clone()).or_else(|| self.parent.clone());
        Spans { root: None, parent, model: None, compute: None }
    }

    /// Opens the model span at `at`.
    pub fn open_model(&mut self, at: Instant, attributes: Vec<KeyValue>, model: &str) {
        let Some(pipeline) = PIPELINE.get() else { return };
        let span = child_span(&pipeline.tracer, model.to_string(), at, attributes, self.parent.clone());
        self.model = Some(span);
    }

    /// Records a frontend event on the `InferRequest` span.
    pub fn frontend_event(&mut self, name: &'static str, at: Instant) {
        if let Some(root) = &mut self.root {
            root.add_event_with_timestamp(name, super::wall_clock(at), Vec::new());
        }
    }

    /// Records a server event: `COMPUTE_START` opens the compute span and `COMPUTE_END` closes it, the
    /// compute events go on it and the others on the model span, which `REQUEST_END` closes.
    pub fn event(&mut self, name: &'static str, at: Instant) {
        let when = super::wall_clock(at);
        if name == "COMPUTE_START" {
            if let Some(pipeline) = PIPELINE.get() {
                let parent = self.model.as_ref().map(|span| span.span_context().clone());
                self.compute = Some(child_span(&pipeline.tracer, "compute".into(), at, Vec::new(), parent));
            }
        }
        let span = match name.starts_with("COMPUTE_") {
            true => self.compute.as_mut(),
            false => self.model.as_mut(),
        };
        if let Some(span) = span {
            span.add_event_with_timestamp(name, when, Vec::new());
        }
        let closing = match name {
            "COMPUTE_END" => self.compute.take(),
            "REQUEST_END" => self.model.take(),
            _ => None,
        };
        if let Some(mut span) = closing {
            span.end_with_timestamp(when);
        }
    }
}

/// A span named `name` started at `at`, under `parent` (a root span without one).
fn child_span(
    tracer: &SdkTracer,
    name: String,
    at: Instant,
    attributes: Vec<KeyValue>,
    parent: Option<SpanContext>,
) -> Span {
    let parent = parent.map_or_else(Context::new, |span| Context::new().with_remote_span_context(span));
    tracer
        .span_builder(name)
        .with_kind(SpanKind::Server)
        .with_start_time(super::wall_clock(at))
        .with_attributes(attributes)
        .start_with_context(tracer, &parent)
}

impl Drop for Spans {
    /// Ends what is still open (a request that failed before its end was recorded) and the root span.
    fn drop(&mut self) {
        let now = super::wall_clock(Instant::now());
        for mut span in [self.compute.take(), self.model.take(), self.root.take()].into_iter().flatten() {
            span.end_with_timestamp(now);
        }
    }
}
