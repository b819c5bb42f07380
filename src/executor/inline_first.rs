//! Where hyper runs each HTTP/2 stream (one gRPC call): first in place, inside the connection's task, and
//! on a task of its own only if the call has to wait.
//!
//! hyper spawns a task per stream by default. For a call that needs no waiting (a Wasm plugin finishing
//! within its time slice, health checks, metadata) that spawn is most of the cost of the call: the new
//! task is queued, an idle runtime thread is woken to steal it, and its response wakes the connection task
//! back on the thread it came from. Polling the call once in place answers it in the same pass of the
//! connection that read it, with no wake-up at all.
//!
//! The trade-off: a call's first stretch, up to its first wait, holds the connection's other calls back.
//! That stretch is bounded. A plugin yields at the next epoch tick (2 ms); a native model runs in place only
//! calls it expects to take under 1 ms (`backends::threaded`); a batcher queue, a large request body still
//! arriving, a long native call all wait at once. Whatever is left then goes to a task of its own,
//! so calls on one connection still spread over every runtime thread.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::{Context, Waker};

#[derive(Clone, Copy, Debug, Default)]
pub struct InlineFirst;

impl<F> hyper::rt::Executor<F> for InlineFirst
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, call: F) {
        run_here_first(call, "a gRPC call panicked; its stream was reset");
    }
}

/// Polls `call` once in the caller's thread, then, if it has to wait, on a task of its own. Besides the
/// wake-up it saves, this starts calls in the order they are handed over: what a call does before its first
/// wait (e.g. joining a sequence) happens before the next call starts. `on_panic` is logged if it panics
/// there (the panic hook has already logged the message); the call is dropped, the caller carries on.
pub fn run_here_first<F>(call: F, on_panic: &str)
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut call = Box::pin(call);
    // No waker is needed for this first poll: if the call waits, the task spawned below polls it again
    // straight away, and a pending future only has to wake the waker of its latest poll.
    let mut cx = Context::from_waker(Waker::noop());
    match catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(&mut cx))) {
        Ok(done) if done.is_ready() => {}
        Ok(_) => drop(tokio::spawn(call)),
        Err(_) => tracing::error!("{on_panic}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn a_call_that_needs_no_wait_is_answered_before_execute_returns() {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        InlineFirst.execute(async move { flag.store(true, Ordering::SeqCst) });
        assert!(done.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_call_that_waits_finishes_on_a_task_of_its_own() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<u32>();
        InlineFirst.execute(async move {
            let value = rx.await.unwrap();
            done_tx.send(value + 1).unwrap();
        });
        tx.send(41).unwrap();
        assert_eq!(done_rx.await.unwrap(), 42);
    }

    #[tokio::test]
    async fn a_call_that_panics_leaves_the_caller_running() {
        InlineFirst.execute(async { panic!("a bug in a handler") });
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        InlineFirst.execute(async move { flag.store(true, Ordering::SeqCst) });
        assert!(done.load(Ordering::SeqCst));
    }
}
