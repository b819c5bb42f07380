//! Busy polling: a runtime thread with nothing left to do watches the client connections for a short while
//! (`--busy-poll-us`) before it goes to sleep, so that a request that arrives meanwhile finds it awake.
//!
//! Why: at low concurrency most of a request's latency is not the server's work but waking the processes
//! that take turns on the CPUs. A thread asleep in `epoll_wait` on an idle CPU is woken by an interrupt to
//! that CPU, which on a virtual machine is a round trip through the hypervisor. Measured with bench/ab.py on
//! `simple` (2 vCPUs, 4 paired trials, 100 µs budget): p50 at concurrency 1 fell from 109 to 58 µs over
//! HTTP and from 129 to 62 µs over gRPC; throughput at concurrency 4 read 0.94-0.98x over HTTP and 1.20x
//! over gRPC, at 16 0.98x and 1.07x. ONNX Runtime's own thread pools spin for the same reason.
//!
//! What it costs: after each burst of work, one thread spends up to the budget polling. It does not spin
//! when that would take a CPU from work the server is waiting for: while any request waits on something a
//! socket will not announce (an ONNX Runtime instance thread, the dynamic batcher's delay; see `Waiting`)
//! and for `QUIET_AFTER_WAIT` after; with fewer than two CPUs to run on (`available_parallelism`, which
//! follows a container's CPU limit); and only one thread spins at a time. An idle server does not spin: it
//! spins only after it was woken, which an idle server is not. `--busy-poll-us 0` turns it off.
//!
//! How: every accepted connection is also registered with an epoll instance of our own (mio's `Poll`,
//! readable interest). Tokio calls `before_park` on a worker thread that found no task to run, right before
//! it sleeps in the I/O driver or on its condition variable; the spin polls our instance with a zero
//! timeout until a connection turns readable, the budget runs out, or a request starts waiting elsewhere,
//! yielding its CPU between polls to any thread that wants it. Then the thread parks as it would have, and
//! the driver finds the event ready without sleeping. The yield is what keeps the spin from hurting: a spin
//! that kept its CPU (a pause instruction between polls) made the client's threads wait behind it for a
//! scheduler slice, and `simple`'s p99 at HTTP concurrency 4 went from 460-590 µs to 1690-1950 µs; yielding,
//! it reads 370-410 µs. Our instance is edge-triggered (mio's only mode): an edge that came while nobody
//! spun ends the next spin at once, which costs that spin, never a request.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};

struct BusyPoll {
    budget: Duration,
    /// Registers connections; a clone of `spinner`'s registry, usable without its lock.
    registry: Registry,
    /// The poll instance and its event buffer. Held by the thread that spins, so one spins at a time.
    spinner: Mutex<(Poll, Events)>,
}

static BUSY_POLL: OnceLock<BusyPoll> = OnceLock::new();

/// Requests now waiting on something other than a socket.
static WAITING: AtomicUsize = AtomicUsize::new(0);
/// When the last such wait ended, in µs after `CLOCK_START`.
static LAST_WAIT_END: AtomicU64 = AtomicU64::new(0);
static CLOCK_START: OnceLock<Instant> = OnceLock::new();

/// How long after a wait on another thread ends no thread spins: the pool that answered (ONNX Runtime's
/// intra-op workers) keeps spinning for a while itself, and a spin of ours would take the CPU the client
/// needs to send the next request.
const QUIET_AFTER_WAIT: Duration = Duration::from_millis(1);

/// Turns busy polling on for the process, with `budget` per spin, where it can help: a zero budget or a
/// single CPU leaves it off. Call before the runtime starts.
pub fn enable(budget: Duration) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if budget.is_zero() || cpus < 2 {
        return;
    }
    let instance = Poll::new().and_then(|poll| Ok((poll.registry().try_clone()?, poll)));
    match instance {
        Ok((registry, poll)) => {
            let _ = BUSY_POLL.set(BusyPoll { budget, registry, spinner: Mutex::new((poll, Events::with_capacity(1))) });
        }
        Err(e) => tracing::warn!("busy polling is off: cannot create its epoll instance: {e}"),
    }
}

/// Adds an accepted connection to what a spinning thread watches. Closing the socket removes it.
pub fn watch(fd: RawFd) {
    if let Some(busy) = BUSY_POLL.get() {
        // A failure (out of memory in the kernel) only means this connection's requests may find the
        // runtime asleep, as they would without busy polling.
        let _ = busy.registry.register(&mut SourceFd(&fd), Token(0), Interest::READABLE);
    }
}

/// The runtime's `on_thread_park` hook: spins, unless a request waits elsewhere or did so lately, or
/// another thread is spinning.
pub fn before_park() {
    let Some(busy) = BUSY_POLL.get() else { return };
    let now = micros_since_start(Instant::now());
    if !quiet(WAITING.load(Ordering::Relaxed), LAST_WAIT_END.load(Ordering::Relaxed), now) {
        return;
    }
    if let Ok(mut spinner) = busy.spinner.try_lock() {
        let (poll, events) = &mut *spinner;
        spin(poll, events, &WAITING, busy.budget);
    }
}

/// Whether nothing has waited on another thread or a timer for `QUIET_AFTER_WAIT`: `waiting` requests
/// wait now, the last wait ended at `last_wait_end`; times in µs after `CLOCK_START`.
fn quiet(waiting: usize, last_wait_end: u64, now: u64) -> bool {
    waiting == 0 && now >= last_wait_end + QUIET_AFTER_WAIT.as_micros() as u64
}

/// Why a spin ended.
#[derive(Debug, PartialEq)]
enum End {
    Readable,
    Waiting,
    BudgetSpent,
    PollFailed,
}

/// Polls `poll` without blocking until a registered source is ready, `waiting` is nonzero, or `budget` has
/// passed.
fn spin(poll: &mut Poll, events: &mut Events, waiting: &AtomicUsize, budget: Duration) -> End {
    let start = Instant::now();
    loop {
        if waiting.load(Ordering::Relaxed) > 0 {
            return End::Waiting;
        }
        if start.elapsed() >= budget {
            return End::BudgetSpent;
        }
        match poll.poll(events, Some(Duration::ZERO)) {
            Ok(()) if events.is_empty() => std::thread::yield_now(),
            Ok(()) => return End::Readable,
            Err(_) => return End::PollFailed,
        }
    }
}

/// Held while a request waits on something that a socket will not announce: another thread's work or a
/// timer. A thread spinning then would take a CPU from that work or run the timer late, so none spins.
pub struct Waiting(());

impl Waiting {
    pub fn start() -> Self {
        WAITING.fetch_add(1, Ordering::Relaxed);
        Waiting(())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        LAST_WAIT_END.fetch_max(micros_since_start(Instant::now()), Ordering::Relaxed);
        WAITING.fetch_sub(1, Ordering::Relaxed);
    }
}

fn micros_since_start(now: Instant) -> u64 {
    now.saturating_duration_since(*CLOCK_START.get_or_init(Instant::now)).as_micros() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::sync::Arc;

    /// A poll instance watching the accepting end of a loopback connection, and the other end.
    fn watched_connection() -> (Poll, TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let poll = Poll::new().unwrap();
        poll.registry().register(&mut SourceFd(&accepted.as_raw_fd()), Token(0), Interest::READABLE).unwrap();
        (poll, accepted, client)
    }

    #[test]
    fn no_spin_while_a_request_waits_elsewhere_nor_for_a_while_after() {
        let after = QUIET_AFTER_WAIT.as_micros() as u64;
        assert!(quiet(0, 0, after));
        assert!(!quiet(1, 0, 10 * after));
        assert!(!quiet(0, 5000, 5000 + after - 1));
        assert!(quiet(0, 5000, 5000 + after));
    }

    #[test]
    fn a_spin_ends_when_a_request_arrives() {
        let (mut poll, _accepted, mut client) = watched_connection();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            client.write_all(b"GET /v2/health/ready HTTP/1.1\r\n\r\n").unwrap();
            client
        });
        let end = spin(&mut poll, &mut Events::with_capacity(1), &AtomicUsize::new(0), Duration::from_secs(60));
        assert_eq!(end, End::Readable);
        sender.join().unwrap();
    }

    #[test]
    fn a_spin_ends_when_its_budget_is_spent() {
        let (mut poll, _accepted, _client) = watched_connection();
        let end = spin(&mut poll, &mut Events::with_capacity(1), &AtomicUsize::new(0), Duration::from_millis(20));
        assert_eq!(end, End::BudgetSpent);
    }

    #[test]
    fn a_spin_ends_when_a_request_starts_waiting_on_another_thread() {
        let (mut poll, _accepted, _client) = watched_connection();
        let waiting = Arc::new(AtomicUsize::new(0));
        let starter = {
            let waiting = waiting.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                waiting.fetch_add(1, Ordering::Relaxed);
            })
        };
        let end = spin(&mut poll, &mut Events::with_capacity(1), &waiting, Duration::from_secs(60));
        assert_eq!(end, End::Waiting);
        starter.join().unwrap();
    }
}
