//! How requests use the runtime's threads. One policy runs through this module: keep a request on a thread
//! that is already awake and already has it in hand. On a small machine the cost of a request at low
//! concurrency is mostly wake-ups — an idle thread woken to steal a task, a task handed to another thread
//! and its answer handed back — not the server's own work. So:
//! - `connections` accepts connections and runs each one's requests inside the connection's own task,
//!   held to the server's `ConnectionLimits`;
//! - `poll_again` polls a connection again in place when it wakes itself, instead of rescheduling it;
//! - `inline_first` runs each gRPC call in place first and gives it a task of its own only if it waits;
//! - `in_flight` runs a model execution inside the request's task, yet lets it finish on its own if the
//!   caller goes away;
//! - `busy_poll` keeps a thread with nothing to do watching the connections for a moment before it sleeps,
//!   so that the next request finds it awake.
//!
//! The rest of the server sees two things: `runtime`, which builds the runtime with that policy, and
//! `Waiting`, which a backend or the scheduler holds while a request waits on work a socket will not
//! announce (another thread, a timer), so that no thread spins then.

mod busy_poll;
pub mod connections;
mod in_flight;
mod inline_first;
mod poll_again;

use std::time::Duration;

pub use busy_poll::Waiting;
pub use in_flight::InFlight;
pub use inline_first::{run_here_first, InlineFirst};

/// The multi-threaded runtime the server runs on, with busy polling for up to `busy_poll` per spin (zero:
/// off). Call once, before anything else uses the runtime.
pub fn runtime(busy_poll: Duration) -> std::io::Result<tokio::runtime::Runtime> {
    busy_poll::enable(busy_poll);
    tokio::runtime::Builder::new_multi_thread().enable_all().on_thread_park(busy_poll::before_park).build()
}
