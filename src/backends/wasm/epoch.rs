//! The epoch ticker: the thread that advances the engines' epochs, which is what interrupts plugin code
//! (each store yields to the executor at every tick, and a plugin past its execute timeout is stopped at
//! the next one).
//!
//! Ticks only matter while plugin code may be running, so every call into a plugin holds a `Running` guard
//! and the ticker goes to sleep once no guard has existed for `IDLE_TICKS` ticks: an idle server then
//! wakes once per `IDLE_CHECK` instead of every `EPOCH_TICK`. A call that finds the ticker asleep wakes it
//! before entering the plugin. The ticker sleeps only after a quiet spell, so under load the calls never
//! pay for waking it, only for two atomic additions.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

/// How often the epoch advances while plugin code may run.
const EPOCH_TICK: Duration = Duration::from_millis(2);
/// Ticks without any call into a plugin before the ticker sleeps (100 ms).
const IDLE_TICKS: u32 = 50;
/// How often a sleeping ticker still ticks, to notice that its engines are gone.
const IDLE_CHECK: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub struct EpochTicker(Arc<Shared>);

struct Shared {
    /// Calls into plugins under way.
    running: AtomicUsize,
    asleep: AtomicBool,
    thread: OnceLock<Thread>,
}

/// Held for the length of one call into a plugin; the ticker keeps ticking while any exists.
pub struct Running(Arc<Shared>);

impl EpochTicker {
    /// Starts the ticker thread. `tick` advances the epochs and returns false once there is nothing left to
    /// tick (the engines were dropped), which ends the thread.
    pub fn start(mut tick: impl FnMut() -> bool + Send + 'static) -> std::io::Result<Self> {
        let shared =
            Arc::new(Shared { running: AtomicUsize::new(0), asleep: AtomicBool::new(false), thread: OnceLock::new() });
        let ticker = shared.clone();
        std::thread::Builder::new().name("wasm-epoch".into()).spawn(move || {
            // Set before `asleep` can first be true, so a call that sees it asleep finds the thread to wake.
            let _ = ticker.thread.set(std::thread::current());
            let mut idle = 0;
            while tick() {
                idle = if ticker.running.load(SeqCst) == 0 { idle + 1 } else { 0 };
                if idle >= IDLE_TICKS {
                    // Woken by a call, the next tick resets `idle`; woken by the timeout, it sleeps again.
                    ticker.sleep_while_idle();
                } else {
                    std::thread::sleep(EPOCH_TICK);
                }
            }
        })?;
        Ok(EpochTicker(shared))
    }

    /// Marks a call into a plugin as under way, waking the ticker if it sleeps.
    pub fn running(&self) -> Running {
        self.0.running.fetch_add(1, SeqCst);
        // Sequentially consistent on both sides: either the ticker sees this call before it parks, or this
        // sees `asleep` and unparks it (an unpark before the park makes the park return at once).
        if let Some(thread) = self.0.thread.get().filter(|_| self.0.asleep.load(SeqCst)) {
            thread.unpark();
        }
        Running(self.0.clone())
    }
}

impl Shared {
    fn sleep_while_idle(&self) {
        self.asleep.store(true, SeqCst);
        if self.running.load(SeqCst) == 0 {
            std::thread::park_timeout(IDLE_CHECK);
        }
        self.asleep.store(false, SeqCst);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn counting_ticker() -> (EpochTicker, Arc<AtomicU64>) {
        let ticks = Arc::new(AtomicU64::new(0));
        let counter = ticks.clone();
        let ticker = EpochTicker::start(move || {
            counter.fetch_add(1, SeqCst);
            true
        })
        .unwrap();
        (ticker, ticks)
    }

    /// Ticks counted over `window`.
    fn ticks_during(ticks: &AtomicU64, window: Duration) -> u64 {
        let before = ticks.load(SeqCst);
        std::thread::sleep(window);
        ticks.load(SeqCst) - before
    }

    #[test]
    fn sleeps_when_idle_and_ticks_while_a_call_runs() {
        let (ticker, ticks) = counting_ticker();
        std::thread::sleep(EPOCH_TICK * IDLE_TICKS * 3);
        assert!(ticks_during(&ticks, IDLE_CHECK * 2) <= 3, "an idle ticker keeps ticking");

        let call = ticker.running();
        assert!(ticks_during(&ticks, Duration::from_millis(200)) >= 10, "the ticker did not wake for a running call");
        std::thread::sleep(EPOCH_TICK * IDLE_TICKS * 3);
        assert!(ticks_during(&ticks, Duration::from_millis(100)) >= 5, "the ticker slept during a running call");
        drop(call);
    }

    #[test]
    fn stops_when_there_is_nothing_to_tick() {
        let ticks = Arc::new(AtomicU64::new(0));
        let counter = ticks.clone();
        let ticker = EpochTicker::start(move || counter.fetch_add(1, SeqCst) < 3).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let _call = ticker.running();
        assert_eq!(ticks_during(&ticks, Duration::from_millis(50)), 0);
        assert_eq!(ticks.load(SeqCst), 4);
    }
}
