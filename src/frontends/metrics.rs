//! `GET /metrics` on `--metrics-port`: the Prometheus text exposition of what `observability::metrics`
//! records.

use std::sync::Arc;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use hyper_util::service::TowerToHyperService;

use crate::executor::connections::{self, ConnectionLimits, Opening};
use crate::observability::metrics::Metrics;

pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    limits: ConnectionLimits,
    header_timeout: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let router = Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], metrics.render()).into_response() }
        }),
    );
    let service = TowerToHyperService::new(router);
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    connections::serve(listener, "metrics", Opening::FirstByte, limits, shutdown, move |io| {
        builder.serve_connection(io, service.clone())
    })
    .await;
}
