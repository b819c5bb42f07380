//! Accepts HTTP connections and serves each with hyper on a task of its own, until shutdown: then every
//! open connection finishes the request it is serving and closes. This is what `axum::serve` does; it is
//! written out here so that each connection's task can be wrapped in `PollAgain` (see there for why).

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};

use super::poll_again::PollAgain;

pub async fn serve(listener: TcpListener, router: Router, shutdown: impl Future<Output = ()>) {
    let service = TowerToHyperService::new(router);
    let connections = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = accept(&listener) => accepted,
            () = &mut shutdown => break,
        };
        configure(&tcp);
        let connection = http1::Builder::new().serve_connection(TokioIo::new(tcp), service.clone());
        let connection = connections.watch(connection);
        tokio::spawn(PollAgain::new(async move {
            if let Err(e) = connection.await {
                tracing::debug!("HTTP connection ended with an error: {e}");
            }
        }));
    }
    connections.shutdown().await;
}

/// The next connection. A failure that concerns one connection (it was reset before it was accepted) is
/// skipped; any other (out of file descriptors) is logged and retried after a pause, as `axum::serve` does.
async fn accept(listener: &TcpListener) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => return tcp,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::error!("cannot accept an HTTP connection: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}

/// Responses go out as soon as they are written, as on the gRPC port. With Nagle's algorithm the last,
/// partial segment of a response larger than one segment waits for the client to acknowledge the ones
/// before it. Measured on identity_fp32 with 80-400 KB binary outputs, sequential requests: p50 0.80-0.92
/// of the time without it (median of 3 interleaved rounds); small responses are unaffected.
fn configure(tcp: &TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("cannot set TCP_NODELAY on an HTTP connection: {e}");
    }
}
