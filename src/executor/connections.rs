//! Every frontend's accept loop: connections are taken off the listening socket and each is served by hyper
//! on a task of its own, until shutdown; then the listening socket is closed at once and every open
//! connection finishes what it is serving and closes. This is what `axum::serve` and tonic's `Server` do.
//! It is written out here so that each connection's task can be wrapped in `PollAgain` (see there for
//! why), so that hyper runs each gRPC call with our executor (`inline_first`), and so that every
//! port is held to the same `ConnectionLimits`.

use std::fmt::Display;
use std::future::Future;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulConnection, GracefulShutdown};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::busy_poll;
use super::poll_again::PollAgain;

/// What every connection, on every port, is held to: a cap on open connections (so that idle or slow
/// clients cannot use up the process's file descriptors and lock everyone else out), and a time within
/// which a new connection must start talking.
#[derive(Clone)]
pub struct ConnectionLimits {
    slots: Arc<Semaphore>,
    max: usize,
    first_bytes: Duration,
    /// When a refusal was last logged (ms since `epoch`), so that a flood logs once a second, not per
    /// connection.
    refused_logged: Arc<AtomicU64>,
    epoch: Instant,
}

impl ConnectionLimits {
    /// At most `requested` connections open at once, or fewer where the process's open-file limit leaves
    /// less room; a connection silent for `first_bytes` after it was accepted is closed.
    pub fn for_process(requested: u64, first_bytes: Duration) -> Self {
        let max = match open_file_limit() {
            Some(files) if files.saturating_sub(RESERVED_DESCRIPTORS) < requested => {
                let max = files.saturating_sub(RESERVED_DESCRIPTORS).max(1);
                tracing::warn!(
                    "the open-file limit is {files}: at most {max} client connections will be open at once \
                     (--max-connections {requested} asks for more)"
                );
                max
            }
            _ => requested,
        };
        Self::new(usize::try_from(max).unwrap_or(usize::MAX), first_bytes)
    }

    /// At most `max` connections open at once; a connection silent for `first_bytes` after it was accepted
    /// is closed.
    pub fn new(max: usize, first_bytes: Duration) -> Self {
        ConnectionLimits {
            slots: Arc::new(Semaphore::new(max)),
            max,
            first_bytes,
            refused_logged: Arc::new(AtomicU64::new(0)),
            epoch: Instant::now(),
        }
    }

    fn refused(&self, protocol: &str) {
        let now = self.epoch.elapsed().as_millis() as u64 + 1000;
        let last = self.refused_logged.load(Ordering::Relaxed);
        if now >= last + 1000
            && self.refused_logged.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            tracing::warn!(
                "{protocol}: refusing new connections: {} are open, the limit (--max-connections)",
                self.max
            );
        }
    }
}

/// Serves every connection `listener` accepts with the hyper connection `connect` makes of it, until
/// `shutdown` resolves. `protocol` names the port in the log.
pub async fn serve<C>(
    listener: TcpListener,
    protocol: &'static str,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
    connect: impl Fn(TokioIo<TcpStream>) -> C + Clone + Send + 'static,
) where
    C: GracefulConnection + Send + 'static,
    C::Error: Display,
{
    let connections = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            tcp = next_connection(&listener, protocol) => tcp,
            () = &mut shutdown => break,
        };
        // Over the limit the connection is closed at once: the client sees a clear failure instead of
        // waiting in the listen queue for a slot.
        let Ok(slot) = limits.slots.clone().try_acquire_owned() else {
            limits.refused(protocol);
            continue;
        };
        let (watcher, connect, first_bytes) = (connections.watcher(), connect.clone(), limits.first_bytes);
        tokio::spawn(PollAgain::new(async move {
            let _slot = slot;
            // A peek, not `readable()`: readiness can be reported before any byte has arrived.
            if !matches!(tokio::time::timeout(first_bytes, tcp.peek(&mut [0])).await, Ok(Ok(1))) {
                tracing::debug!("{protocol}: closed a connection that sent nothing for {first_bytes:?}");
                return;
            }
            if let Err(e) = watcher.watch(connect(TokioIo::new(tcp))).await {
                tracing::debug!("{protocol} connection ended with an error: {e}");
            }
        }));
    }
    // Stop accepting now: connections that arrive while the open ones finish are refused by the system
    // instead of waiting in a queue no one reads.
    drop(listener);
    connections.shutdown().await;
}

/// Descriptors kept below the open-file limit for the server's own use: model files, the instances'
/// threads and pipes, the plugin cache.
const RESERVED_DESCRIPTORS: u64 = 256;

/// The process's open-file limit, after raising its soft limit to the hard one (as servers commonly do:
/// the soft default of 1024 is far below what a server with many clients needs).
fn open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    (limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// The next connection, ready to serve. A failure that concerns one connection (it was reset before it was
/// accepted) is skipped; any other (out of file descriptors) is logged and retried after a pause, as
/// `axum::serve` and tonic do.
async fn next_connection(listener: &TcpListener, protocol: &str) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => {
                configure(&tcp, protocol);
                return tcp;
            }
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::error!("cannot accept a {protocol} connection: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}

/// Responses go out as soon as they are written. With Nagle's algorithm the last, partial segment of a
/// response larger than one segment waits for the client to acknowledge the ones before it. Measured on
/// identity_fp32 over HTTP with 80-400 KB binary outputs, sequential requests: p50 0.80-0.92 of the time
/// without it (median of 3 interleaved rounds); small responses are unaffected.
fn configure(tcp: &TcpStream, protocol: &str) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("cannot set TCP_NODELAY on a {protocol} connection: {e}");
    }
    busy_poll::watch(tcp.as_raw_fd());
}
