//! Runs an execution inside the task that asked for it. A task of its own per execution costs a hand-off:
//! spawning wakes an idle runtime thread to steal the new task, and finishing wakes the caller back, which
//! at concurrency 1 on a small machine costs more than a small model's whole call. Running in place keeps
//! the two guarantees that task gave:
//! - a caller that goes away (a client that disconnects mid-request) does not abandon the instance half-way
//!   through a call: what is left of the execution moves onto a task of its own and finishes there;
//! - a panic in a backend fails that request only and comes back as its message; the execution's state is
//!   dropped while the panic unwinds, so that what it holds can tell (a lease then retires its instance).

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// An execution polled in place; boxed so that it can move onto a task without being moved in memory.
pub struct InFlight<T: Send + 'static> {
    execution: Option<Boxed<T>>,
}

impl<T: Send + 'static> InFlight<T> {
    pub fn new(execution: impl Future<Output = T> + Send + 'static) -> Self {
        InFlight { execution: Some(Box::pin(execution)) }
    }
}

impl<T: Send + 'static> Future for InFlight<T> {
    /// The execution's output, or the message of the panic that ended it.
    type Output = Result<T, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let execution = self.execution.as_mut().expect("polled after it finished");
        match catch_unwind(AssertUnwindSafe(|| execution.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => {
                self.execution = None;
                Poll::Ready(Ok(output))
            }
            Err(panic) => {
                // An async block drops what it holds as the panic unwinds through it, so a lease has
                // already retired its instance; what is left is a spent shell.
                self.execution = None;
                Poll::Ready(Err(panic_message(panic.as_ref())))
            }
        }
    }
}

impl<T: Send + 'static> Drop for InFlight<T> {
    fn drop(&mut self) {
        let Some(rest) = self.execution.take() else { return };
        // Without a runtime (the process is exiting) there is nothing left to finish it on.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(rest);
        }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    let text = panic.downcast_ref::<&str>().copied().or_else(|| panic.downcast_ref::<String>().map(String::as_str));
    match text {
        Some(text) => format!("panicked: {text}"),
        None => "panicked".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tokio::sync::oneshot;

    /// Records whether it was dropped during a panic.
    struct Witness(Arc<AtomicBool>);

    impl Drop for Witness {
        fn drop(&mut self) {
            self.0.store(std::thread::panicking(), Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn gives_the_output() {
        assert_eq!(InFlight::new(async { 7 }).await, Ok(7));
    }

    #[tokio::test]
    async fn a_panic_becomes_its_message_and_drops_the_state_while_unwinding() {
        let dropped_unwinding = Arc::new(AtomicBool::new(false));
        let witness = Witness(dropped_unwinding.clone());
        let outcome = InFlight::new(async move {
            let _held = witness;
            tokio::task::yield_now().await;
            panic!("boom");
        })
        .await;
        assert_eq!(outcome, Err("panicked: boom".to_string()));
        assert!(dropped_unwinding.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn dropped_before_the_end_it_finishes_on_a_task_of_its_own() {
        let (go, wait) = oneshot::channel::<()>();
        let (finished, done) = oneshot::channel::<()>();
        let mut in_flight = Box::pin(InFlight::new(async move {
            wait.await.unwrap();
            finished.send(()).unwrap();
        }));
        assert!(in_flight.as_mut().poll(&mut Context::from_waker(std::task::Waker::noop())).is_pending());
        drop(in_flight);
        go.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), done).await.expect("finished").unwrap();
    }
}
