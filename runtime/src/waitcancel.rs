//! Ending an execution's wait from outside the runtime: a caller that knows the device can
//! make no more progress (a fault campaign watching its emulated device go quiet with an
//! execution unfinished) need not wait out the execution timeout to call the execution hung.
//! The wait then ends exactly as at its timeout (`NRT_TIMEOUT`, the same message and state),
//! after one more look at the notification queues, so an execution that did complete is
//! still reported complete.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Shared between a model ([`crate::Model::set_wait_cancel`]) and a watchdog thread.
#[derive(Debug, Default)]
pub struct WaitCancel {
    /// The execution now waiting for its completion (its start rung), 0 for none.
    waiting: AtomicU64,
    /// The execution asked to stop waiting (0 for none).
    cancel: AtomicU64,
    /// Executions begun so far (the next one's number is this plus one).
    begun: AtomicU64,
}

impl WaitCancel {
    /// A token no execution waits on yet.
    pub fn new() -> WaitCancel {
        WaitCancel::default()
    }

    /// The execution now waiting for its completion (numbered from 1 in the order they
    /// start), or None between executions and before the start is rung.
    pub fn waiting(&self) -> Option<u64> {
        match self.waiting.load(Ordering::Acquire) {
            0 => None,
            n => Some(n),
        }
    }

    /// Ask execution `exec` ([`Self::waiting`]) to stop waiting, as at its timeout. An
    /// execution that has already ended, or a later one, is not affected.
    pub fn cancel(&self, exec: u64) {
        self.cancel.store(exec, Ordering::Release);
    }

    /// Run `f` with a watchdog beside it on a thread of its own: every `every`, where an
    /// execution waits and `quiescent()` (the caller's knowledge that the device can make no
    /// more progress by itself) held at two looks in a row during that wait, it asks the
    /// execution to stop waiting. A device that completed the execution is quiescent too: the
    /// wait then still sees the completion (it looks at the queues once more after the
    /// request). The watchdog stops when `f` returns or unwinds: it is woken then, not left
    /// to finish its sleep (a campaign runs thousands of short executions, each of which would
    /// otherwise wait up to `every` for its watchdog to join).
    pub fn watching<R>(
        &self,
        quiescent: impl Fn() -> bool + Sync,
        every: Duration,
        f: impl FnOnce() -> R,
    ) -> R {
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let watchdog = s.spawn(|| self.watch(&quiescent, &done, every));
            let _stop = StopOnDrop(&done, watchdog.thread());
            f()
        })
    }

    /// The watchdog's loop, until `done` ([`Self::watching`]).
    fn watch(&self, quiescent: &impl Fn() -> bool, done: &AtomicBool, every: Duration) {
        let mut quiet: Option<(u64, u32)> = None;
        while !done.load(Ordering::Acquire) {
            sleep_unless(done, every);
            if done.load(Ordering::Acquire) {
                return;
            }
            quiet = match self.waiting() {
                Some(e) if quiescent() => match quiet {
                    Some((q, n)) if q == e => Some((e, n.saturating_add(1))),
                    _ => Some((e, 1)),
                },
                _ => None,
            };
            if let Some((e, 2..)) = quiet {
                self.cancel(e);
            }
        }
    }

    /// An execution's wait begins (its start rung): its number, in `waiting` until the
    /// returned guard drops.
    pub(crate) fn begin(&self) -> Waiting<'_> {
        let exec = self.begun.fetch_add(1, Ordering::AcqRel) + 1;
        self.waiting.store(exec, Ordering::Release);
        Waiting { token: self, exec }
    }
}

/// Sleep `d`, parked (an unpark ends it early: spurious wake-ups and early unparks are
/// slept out unless `done` is set).
fn sleep_unless(done: &AtomicBool, d: Duration) {
    let until = std::time::Instant::now() + d;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || done.load(Ordering::Acquire) {
            return;
        }
        std::thread::park_timeout(left);
    }
}

/// Sets its flag and wakes the watchdog when dropped, on return or unwind alike (a scope
/// would otherwise wait for the watchdog forever after a panic).
struct StopOnDrop<'a>(&'a AtomicBool, &'a std::thread::Thread);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
        self.1.unpark();
    }
}

/// An execution waiting ([`WaitCancel::begin`]): no longer `waiting` once dropped.
#[derive(Debug)]
pub(crate) struct Waiting<'a> {
    token: &'a WaitCancel,
    exec: u64,
}

impl Waiting<'_> {
    /// Whether this execution was asked to stop waiting. Read it before the last look at
    /// the notification queues: a watchdog asks only once the device is quiet, after
    /// everything it posted.
    pub(crate) fn cancelled(&self) -> bool {
        self.token.cancel.load(Ordering::Acquire) == self.exec
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let _ =
            self.token
                .waiting
                .compare_exchange(self.exec, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_reaches_only_the_execution_it_names() {
        let t = WaitCancel::new();
        assert_eq!(t.waiting(), None);
        t.cancel(1);
        {
            let w = t.begin();
            assert_eq!(t.waiting(), Some(1));
            // Asked before it began, for its number: it stops.
            assert!(w.cancelled());
        }
        assert_eq!(t.waiting(), None, "the wait ended");
        let w = t.begin();
        assert_eq!(t.waiting(), Some(2));
        assert!(
            !w.cancelled(),
            "a cancel of execution 1 reached execution 2"
        );
        t.cancel(2);
        assert!(w.cancelled());
        drop(w);
        assert_eq!(t.waiting(), None);
    }

    #[test]
    fn the_watchdog_asks_a_wait_on_a_quiet_device_to_stop_and_stops_with_its_caller() {
        let t = WaitCancel::new();
        // Quiet at every look: the waiting execution is asked to stop.
        let asked = t.watching(
            || true,
            Duration::ZERO,
            || {
                let w = t.begin();
                while !w.cancelled() {
                    std::thread::yield_now();
                }
                true
            },
        );
        assert!(asked);
        // Never quiet: not asked (the body gives up after 20 ms).
        let asked = t.watching(
            || false,
            Duration::ZERO,
            || {
                let w = t.begin();
                let t0 = std::time::Instant::now();
                while !w.cancelled() && t0.elapsed() < Duration::from_millis(20) {
                    std::thread::yield_now();
                }
                w.cancelled()
            },
        );
        assert!(!asked, "an execution on a busy device was asked to stop");
        // A body that panics stops the watchdog too (else this test would never end).
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            t.watching(|| false, Duration::ZERO, || panic!("the body fails"))
        }));
        assert!(r.is_err());
    }

    /// A watchdog asleep between looks is woken when its caller's body returns: the scope
    /// does not wait out its sleep (a minute here; without the wake-up this test takes it).
    #[test]
    fn the_watchdog_is_woken_when_the_body_returns() {
        let t = WaitCancel::new();
        let t0 = std::time::Instant::now();
        let v = t.watching(|| false, Duration::from_secs(60), || 7);
        assert_eq!(v, 7);
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "watching waited {:?} for its sleeping watchdog",
            t0.elapsed()
        );
    }
}
