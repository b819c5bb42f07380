//! Wiring: start-up (backends, model repository, the service, listeners) and graceful shutdown on
//! SIGINT/SIGTERM. No protocol, backend or request logic lives here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::backends::{ModelCaller, NativePlaces, Peers, Runtimes};
use crate::cli::{ControlMode, Options};
use crate::executor::connections::ConnectionLimits;
use crate::frontends::restricted::{Restrictions, GRPC_HEADER_PREFIX};
use crate::frontends::{grpc, http, metrics};
use crate::observability::logging::Log;
use crate::observability::metrics::Metrics;
use crate::observability::trace;
use crate::repository::{Loader, ModelControl, ModelRepository};
use crate::scheduler::cache::ResponseCache;
use crate::service::{HttpLimits, Service, ServiceSettings};

/// Loads every model, then serves HTTP and gRPC until a shutdown signal. `log` is the running log, which
/// the logging extension changes.
pub async fn run(options: Options, log: Arc<Log>) -> anyhow::Result<()> {
    options.check().map_err(anyhow::Error::msg)?;
    let http_restrictions = Restrictions::parse(&options.http_restricted_api, "", "api")
        .map_err(|e| anyhow::anyhow!("--http-restricted-api: {e}"))?;
    let grpc_restrictions = Restrictions::parse(&options.grpc_restricted_protocol, GRPC_HEADER_PREFIX, "protocol")
        .map_err(|e| anyhow::anyhow!("--grpc-restricted-protocol: {e}"))?;
    let cache_dir = options.component_cache_dir();
    let places = NativePlaces {
        onnx_library: options.backend_setting("onnxruntime", "library").map(PathBuf::from),
        torch_library: options.backend_setting("pytorch", "library").map(PathBuf::from),
        python_runtime: options.backend_setting("python", "runtime-dir").map(PathBuf::from),
    };
    let complete_configs = options.complete_configs();
    let (mut trace_settings, exporter) = options.trace_settings().map_err(anyhow::Error::msg)?;
    match trace_settings.mode {
        trace::Mode::Triton if !trace_settings.level.is_off() && trace_settings.file.is_empty() => tracing::warn!(
            "tracing is on but no trace file is set (--trace-config triton,file=PATH): traces are dropped"
        ),
        trace::Mode::OpenTelemetry if !trace_settings.file.is_empty() || trace_settings.log_frequency != 0 => {
            // As tritonserver: the file settings mean nothing when spans are exported.
            tracing::warn!("the trace file and log frequency are ignored in the opentelemetry trace mode");
            trace_settings.file.clear();
            trace_settings.log_frequency = 0;
        }
        _ => {}
    }
    trace::start(trace_settings, exporter, tokio::runtime::Handle::current()).map_err(anyhow::Error::msg)?;
    let cache = options.response_cache_size().map_err(anyhow::Error::msg)?.map(|bytes| {
        tracing::info!("response cache: local, {bytes} bytes");
        Arc::new(ResponseCache::new(bytes))
    });
    let config_name = options.model_config_name.clone();
    let runtime = tokio::runtime::Handle::current();
    let metrics = Arc::new(Metrics::new());
    let load_metrics = metrics.clone();
    let peers = Peers::default();
    let plugin_peers = peers.clone();
    let loader = tokio::task::spawn_blocking(move || -> anyhow::Result<Loader> {
        let runtimes = Runtimes::new(cache_dir, plugin_peers, places, complete_configs)?;
        Ok(Loader { runtime, runtimes, metrics: load_metrics, config_name, cache })
    })
    .await??;
    let repository = Arc::new(ModelRepository::default());
    let caller: Arc<dyn ModelCaller> = repository.clone();
    let _ = peers.set(Arc::downgrade(&caller));
    let control = Arc::new(ModelControl::new(
        options.model_control_mode,
        options.model_repositories.clone(),
        loader,
        repository.clone(),
        options.model_load_thread_count as usize,
    ));
    control.start(&options.load_models).await.map_err(anyhow::Error::msg)?;
    report_failures(&repository);
    if options.exit_on_error && !repository.all_ready() {
        anyhow::bail!("exiting: some models failed to load (see above); pass --exit-on-error=false to serve the rest");
    }
    if options.model_control_mode == ControlMode::Poll {
        tokio::spawn(control.clone().poll_forever(std::time::Duration::from_secs(options.repository_poll_secs)));
    }
    let http_limits = HttpLimits {
        max_input_size: options.http_max_input_size,
        header_timeout: Duration::from_secs(options.http_header_timeout_secs),
        body_timeout: Duration::from_secs(options.http_body_timeout_secs),
    };
    let settings = ServiceSettings {
        id: options.id.clone(),
        strict_readiness: options.strict_readiness,
        http_limits,
        log,
        allow_client_shm: options.allow_client_shm,
    };
    let service = Arc::new(Service::new(repository.clone(), control, settings));
    let header_timeout = http_limits.header_timeout;
    let limits = ConnectionLimits::for_process(options.max_connections, header_timeout);
    let http_listener = match options.allow_http {
        true => Some(bind(options.http_address, options.http_port, "HTTP").await?),
        false => None,
    };
    let grpc_listener = match options.allow_grpc {
        true => Some(bind(options.grpc_address, options.grpc_port, "gRPC").await?),
        false => None,
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let metrics_server = if options.allow_metrics {
        let listener = bind(options.metrics_address, options.metrics_port, "metrics").await?;
        tracing::info!("Started Metrics Service at {}", display_addr(&listener));
        Some(tokio::spawn(metrics::serve(listener, metrics, limits.clone(), header_timeout, stopped(stop_rx.clone()))))
    } else {
        None
    };
    let mut endpoints = Vec::new();
    if let Some(listener) = http_listener {
        tracing::info!("Started HTTPService at {}", display_addr(&listener));
        let serving =
            http::serve(listener, service.clone(), limits.clone(), http_restrictions, stopped(stop_rx.clone()));
        endpoints.push(tokio::spawn(serving));
    }
    if let Some(listener) = grpc_listener {
        tracing::info!("Started GRPCInferenceService at {}", display_addr(&listener));
        let serving =
            grpc::serve(listener, service.clone(), limits.clone(), grpc_restrictions, stopped(stop_rx.clone()));
        endpoints.push(tokio::spawn(serving));
    }
    shutdown_signal().await;
    service.begin_shutdown();
    drain(Duration::from_secs(options.exit_drain_secs)).await;
    let exit_timeout = Duration::from_secs(options.exit_timeout_secs);
    tracing::info!("shutting down: no new connections; finishing in-flight requests for up to {exit_timeout:?}");
    let _ = stop_tx.send(true);
    let drained = async {
        futures_util::future::join_all(endpoints).await;
        if let Some(metrics_server) = metrics_server {
            let _ = metrics_server.await;
        }
        repository.shutdown().await;
    };
    match tokio::time::timeout(exit_timeout, drained).await {
        Ok(()) => tracing::info!("stopped"),
        Err(_) => tracing::warn!(
            "exit timeout of {exit_timeout:?} reached (--exit-timeout-secs) with connections or requests still open; exiting"
        ),
    }
    trace::tracer().flush();
    Ok(())
}

/// Goes on serving, not ready, for `period` (`--exit-drain-secs`) or until a second signal.
async fn drain(period: Duration) {
    if period.is_zero() {
        return;
    }
    tracing::info!("draining: reporting not ready and still serving for {period:?} (--exit-drain-secs)");
    tokio::select! {
        () = tokio::time::sleep(period) => {}
        () = shutdown_signal() => tracing::info!("a second signal: draining cut short"),
    }
}

fn report_failures(repository: &ModelRepository) {
    for model in repository.records() {
        for failure in model.failures() {
            tracing::error!(model = %model.name, "failed to load: {failure}");
        }
    }
}

async fn bind(address: std::net::IpAddr, port: u16, what: &str) -> anyhow::Result<TcpListener> {
    let address = SocketAddr::new(address, port);
    TcpListener::bind(address).await.with_context(|| format!("cannot listen for {what} on {address}"))
}

fn display_addr(listener: &TcpListener) -> String {
    listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into())
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler cannot fail on unix");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
