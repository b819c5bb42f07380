//! Polls a connection again, in place, when it wakes itself while being polled.
//!
//! Both frontends run request handlers inside the connection's own task (HTTP/1 always; gRPC for as long
//! as a handler does not wait, see `inline_first`), so a connection often wakes itself. For example,
//! hyper's HTTP/1 connection hands each request's body to the handler through a channel, and the handler
//! runs inside the connection's own task: taking the body out of the channel wakes the connection task
//! while that task is running. Tokio treats a task that wakes itself as one that yields: it goes to the
//! back of the run queue and an idle runtime thread is woken to come and steal it. So every request with a
//! body woke the other runtime thread for nothing (strace on `simple` at concurrency 1: one futex wake and
//! one futex wait per request, the woken thread finding no work), which costs CPU the client and the
//! other requests need. Here such a wake only marks the connection, which is polled once more at once.
//! A second self-wake in one poll (hyper's own yield after 16 turns, a plugin yielding at an epoch tick)
//! goes to the runtime as before, so a busy connection still lets other tasks run.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// How many times one poll may poll the connection again after it woke itself.
const AGAIN: usize = 1;

const POLLING: u8 = 1;
const WOKEN: u8 = 2;

pub struct PollAgain<F> {
    inner: Pin<Box<F>>,
    relay: Arc<Relay>,
    waker: Waker,
}

/// The waker the connection sees: while it is being polled, a wake only sets `WOKEN`; otherwise it wakes
/// the task. Both sides act on the one `state`, so a wake from another thread (the I/O driver) that races
/// with the end of a poll is either seen by that poll or wakes the task: it is never lost.
struct Relay {
    state: AtomicU8,
    task: Mutex<Option<Waker>>,
}

impl<F: Future> PollAgain<F> {
    pub fn new(inner: F) -> Self {
        let relay = Arc::new(Relay { state: AtomicU8::new(0), task: Mutex::new(None) });
        PollAgain { inner: Box::pin(inner), waker: Waker::from(relay.clone()), relay }
    }
}

impl<F: Future> Future for PollAgain<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.relay.remember(cx.waker());
        let this = &mut *self;
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..=AGAIN {
            this.relay.state.store(POLLING, Ordering::SeqCst);
            let output = this.inner.as_mut().poll(&mut inner_cx);
            let state = this.relay.state.swap(0, Ordering::SeqCst);
            if output.is_ready() {
                return output;
            }
            if state & WOKEN == 0 {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Relay {
    /// Keeps the task's current waker (a task's waker changes only if it moves between runtimes).
    fn remember(&self, waker: &Waker) {
        let mut task = self.task.lock().expect("relay lock");
        if !task.as_ref().is_some_and(|known| known.will_wake(waker)) {
            *task = Some(waker.clone());
        }
    }
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.state.fetch_or(WOKEN, Ordering::SeqCst) & POLLING == 0 {
            if let Some(task) = self.task.lock().expect("relay lock").as_ref() {
                task.wake_by_ref();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Wakes itself on each of its first `self_wakes` polls, then finishes.
    struct SelfWaking {
        self_wakes: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Future for SelfWaking {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.self_wakes == 0 {
                return Poll::Ready(());
            }
            self.self_wakes -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts the wakes the runtime would get.
    struct Counter(AtomicUsize);
    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll_once(future: &mut PollAgain<SelfWaking>, wakes: &Arc<Counter>) -> Poll<()> {
        let waker = Waker::from(wakes.clone());
        Pin::new(future).poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn one_self_wake_is_polled_again_in_place_without_waking_the_task() {
        let polls = Arc::new(AtomicUsize::new(0));
        let wakes = Arc::new(Counter(AtomicUsize::new(0)));
        let mut future = PollAgain::new(SelfWaking { self_wakes: 1, polls: polls.clone() });
        assert!(poll_once(&mut future, &wakes).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_to_the_runtime() {
        let polls = Arc::new(AtomicUsize::new(0));
        let wakes = Arc::new(Counter(AtomicUsize::new(0)));
        let mut future = PollAgain::new(SelfWaking { self_wakes: 5, polls: polls.clone() });
        assert!(poll_once(&mut future, &wakes).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1 + AGAIN);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "the task is woken to run again later");
    }

    #[test]
    fn a_wake_between_polls_reaches_the_task() {
        let wakes = Arc::new(Counter(AtomicUsize::new(0)));
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let mut future = PollAgain::new(std::future::poll_fn(move |cx| Pin::new(&mut rx).poll(cx).map(|_| ())));
        let waker = Waker::from(wakes.clone());
        assert!(Pin::new(&mut future).poll(&mut Context::from_waker(&waker)).is_pending());
        tx.send(()).unwrap();
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        assert!(Pin::new(&mut future).poll(&mut Context::from_waker(&waker)).is_ready());
    }
}
