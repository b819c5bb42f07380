//! Every frontend's accept loop: connections are taken off the listening socket and each is served by hyper
//! on a task of its own, until shutdown; then the listening socket is closed at once and every open
//! connection finishes what it is serving and closes. This is what `axum::serve` and tonic's `Server` do.
//! It is written out here so that each connection's task can be wrapped in `PollAgain` (see there for
//! why), so that hyper runs each gRPC call with our executor (`inline_first`), and so that every
//! port is held to the same `ConnectionLimits`: a cap on open connections, a deadline to start a request
//! (`Opening`), and a count in the log of the connections each closes.

use std::future::Future;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulConnection, GracefulShutdown};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

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
        ConnectionLimits { slots: Arc::new(Semaphore::new(max)), max, first_bytes }
    }
}

/// Counts one kind of event and logs the count a second after the first one not yet reported, so that a
/// flood makes one line a second, not one a connection.
#[derive(Default)]
struct Tally {
    /// Events not yet reported.
    count: AtomicU64,
    /// Whether a report is due.
    scheduled: AtomicBool,
}

impl Tally {
    /// Counts one event; `report` is called with the count within a second.
    fn note(self: &Arc<Self>, report: impl FnOnce(u64) + Send + 'static) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            let tally = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                tally.scheduled.store(false, Ordering::Release);
                // An event between these two lines schedules its own report, which may then find nothing.
                match tally.count.swap(0, Ordering::Relaxed) {
                    0 => {}
                    count => report(count),
                }
            });
        }
    }
}

/// Serves every connection `listener` accepts with the hyper connection `connect` makes of it, until
/// `shutdown` resolves. `protocol` names the port in the log; `opening` is how many bytes a new connection
/// must have sent within the header timeout to be served (see `Opening`).
pub async fn serve<C>(
    listener: TcpListener,
    protocol: &'static str,
    opening: Opening,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
    connect: impl Fn(TokioIo<TcpStream>) -> C + Clone + Send + 'static,
) where
    C: GracefulConnection<Error = hyper::Error> + Send + 'static,
{
    let connections = GracefulShutdown::new();
    // The connections refused over the cap, closed before they started a request, and closed idle or with a
    // slow request head: each kind is logged with its count, at most once a second.
    let (refused, silent, slow_head) =
        (Arc::new(Tally::default()), Arc::new(Tally::default()), Arc::new(Tally::default()));
    let (closing, _) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            tcp = next_connection(&listener, protocol) => tcp,
            () = &mut shutdown => break,
        };
        // Over the limit the connection is closed at once: the client sees a clear failure instead of
        // waiting in the listen queue for a slot.
        let Ok(slot) = limits.slots.clone().try_acquire_owned() else {
            let max = limits.max;
            refused.note(move |count| {
                tracing::warn!(
                    "{protocol}: refused {count} new connection(s): {max} are open, the limit (--max-connections)"
                )
            });
            continue;
        };
        let (watcher, connect, first_bytes) = (connections.watcher(), connect.clone(), limits.first_bytes);
        let (silent, slow_head, mut closing) = (silent.clone(), slow_head.clone(), closing.subscribe());
        tokio::spawn(PollAgain::new(async move {
            let _slot = slot;
            let started = tokio::select! {
                started = started_in_time(&tcp, opening, first_bytes, protocol, &silent) => started,
                // Stopping: a connection that has not started a request is closed at once (its watcher,
                // dropped with it, would otherwise hold up the graceful shutdown until its time is up).
                _ = closing.changed() => false,
            };
            if !started {
                return;
            }
            match watcher.watch(connect(TokioIo::new(tcp))).await {
                Ok(()) => {}
                // hyper's header read timeout: a keep-alive connection stayed idle, or a request head
                // trickled in, for too long.
                Err(e) if e.is_timeout() => slow_head.note(move |count| {
                    tracing::info!(
                        "{protocol}: closed {count} connection(s) idle or sending a request head for more than \
                         {first_bytes:?} (--http-header-timeout-secs)"
                    )
                }),
                Err(e) => tracing::debug!("{protocol} connection ended with an error: {e}"),
            }
        }));
    }
    let _ = closing.send(true);
    // Stop accepting now: connections that arrive while the open ones finish are refused by the system
    // instead of waiting in a queue no one reads.
    drop(listener);
    connections.shutdown().await;
}

/// What a new connection must send before it is given to hyper, within the header timeout. An HTTP/1
/// connection needs only to start: hyper's own header read timeout bounds the rest of its head. An HTTP/2
/// connection must send the whole 24-byte connection preface, because hyper has no deadline for it and
/// its keep-alive pings start only after it: a client trickling the preface would otherwise hold its slot
/// for good.
#[derive(Clone, Copy)]
pub enum Opening {
    FirstByte,
    Http2Preface,
}

impl Opening {
    fn len(self) -> usize {
        match self {
            Opening::FirstByte => 1,
            Opening::Http2Preface => 24,
        }
    }
}

/// Whether `tcp` sent its `opening` within `deadline`; a connection that did not is counted in `silent`.
async fn started_in_time(
    tcp: &TcpStream,
    opening: Opening,
    deadline: Duration,
    protocol: &'static str,
    silent: &Arc<Tally>,
) -> bool {
    match tokio::time::timeout(deadline, opened(tcp, opening)).await {
        Ok(opened) => opened,
        Err(_) => {
            silent.note(move |count| {
                tracing::info!(
                    "{protocol}: closed {count} new connection(s) that did not start a request within {deadline:?} \
                     (--http-header-timeout-secs)"
                )
            });
            false
        }
    }
}

/// Waits until `tcp` has `opening`'s bytes waiting to be read (true) or is closed first (false). A peek, not
/// `readable()`: readiness can be reported before any byte has arrived.
async fn opened(tcp: &TcpStream, opening: Opening) -> bool {
    let mut head = [0u8; 24];
    loop {
        match tcp.peek(&mut head[..opening.len()]).await {
            Ok(0) | Err(_) => return false,
            Ok(n) if n == opening.len() => return true,
            // Part of it: the socket stays readable, so wait a little before looking again rather than
            // spinning. A client sends its preface in one segment; only a slow one waits here.
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
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
