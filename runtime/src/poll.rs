//! Polling the notification queues for what the device posts: the back-off between polls
//! while an execution (or the load's prologue) runs, and the one long sleep an execution's
//! wait takes where the model's last executions say how long it will run.

use std::time::Duration;

/// Polling for an execution's end: while well short of what the last executions took
/// (`expected`, [`expected_wait`]), sleep most of the rest in one go; then, near the expected
/// end, poll without sleeping ([`near_the_end`]); past it, as [`back_off`].
/// Polling every 10-200 µs woke this thread some 4,600 times a second, each wake-up
/// preempting a data-path helper thread on a 2-CPU host (`docs/performance.md`). Never past
/// `left` (the deadline).
pub(crate) fn pace(
    spins: &mut u32,
    progressed: bool,
    elapsed: Duration,
    expected: Option<Duration>,
    left: Duration,
) {
    match long_sleep(elapsed, expected, left) {
        Some(d) => std::thread::sleep(d),
        None if near_the_end(elapsed, expected) => std::thread::yield_now(),
        None => back_off(spins, progressed),
    }
}

/// Whether an execution expected to take `expected` is in the stretch where its end is
/// polled for without sleeping (offering the CPU to other threads between polls): from the
/// long sleep's end to half again the expected time. Sleeping there, even 10 µs at a time
/// (plus the kernel's 50 µs timer slack), left the device idle ~50 µs an execution between
/// one execution's end and the next one's start (`docs/performance.md`, 2026-12-05).
fn near_the_end(elapsed: Duration, expected: Option<Duration>) -> bool {
    expected.is_some_and(|e| elapsed < (e * 3 / 2).min(e * 3 / 4 + NEAR_END_MAX))
}

/// The longest stretch [`near_the_end`] polls without sleeping, from the long sleep's end: a
/// long execution's end is less certain, and a few hundred microseconds of delay are nothing
/// to it.
const NEAR_END_MAX: Duration = Duration::from_millis(2);

/// What the next execution's wait is expected to take: the shorter of the last two, where
/// they agree within a quarter. A first execution (cold caches, page faults) or a slower or
/// faster one does not set a long sleep on its own; and where the long sleep made one wait
/// longer than the execution, the next two disagree and polling takes over until they
/// agree again.
pub(crate) fn expected_wait(last: [Option<Duration>; 2]) -> Option<Duration> {
    let [Some(a), Some(b)] = last else {
        return None;
    };
    let (lo, hi) = (a.min(b), a.max(b));
    (hi <= lo * 5 / 4).then_some(lo)
}

/// [`pace`]'s one long sleep, if it takes one: up to three quarters of the expected wait
/// (the end is still polled for closely), when that is more than `LONG_SLEEP_MIN` away, and
/// never past `left`.
fn long_sleep(elapsed: Duration, expected: Option<Duration>, left: Duration) -> Option<Duration> {
    let early = expected? * 3 / 4;
    (elapsed + LONG_SLEEP_MIN < early).then(|| (early - elapsed).min(left))
}

/// Shorter sleeps than this are left to [`back_off`]'s ramp.
const LONG_SLEEP_MIN: Duration = Duration::from_micros(200);

/// Polling back-off: spin while the device makes progress, then sleep up to 200 us.
pub(crate) fn back_off(spins: &mut u32, progressed: bool) {
    if progressed {
        *spins = 0;
    } else {
        *spins += 1;
        if *spins > 64 {
            std::thread::sleep(Duration::from_micros(((*spins - 64) as u64 * 10).min(200)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two executions that agree within a quarter set the expectation (the shorter); one,
    /// or two that disagree, set none.
    /// The end is polled for without sleeping from the long sleep's end to half again the
    /// expected time, at most 2 ms of it; never without an expectation.
    #[test]
    fn the_end_is_polled_closely_only_near_the_expected_time() {
        let us = Duration::from_micros;
        assert!(!near_the_end(us(100), None));
        assert!(
            near_the_end(us(0), Some(us(150))),
            "too short for a long sleep"
        );
        assert!(near_the_end(us(700), Some(us(800))));
        assert!(near_the_end(us(1150), Some(us(800))));
        assert!(
            !near_the_end(us(1200), Some(us(800))),
            "half again the expected time"
        );
        let s = Duration::from_secs;
        assert!(near_the_end(us(3_001_000), Some(s(4))));
        assert!(
            !near_the_end(us(3_002_000), Some(s(4))),
            "2 ms past the long sleep at most"
        );
    }

    #[test]
    fn only_two_executions_that_agree_set_an_expected_wait() {
        let ms = Duration::from_millis;
        assert_eq!(expected_wait([None, None]), None);
        assert_eq!(expected_wait([Some(ms(8)), None]), None);
        assert_eq!(expected_wait([Some(ms(8)), Some(ms(9))]), Some(ms(8)));
        assert_eq!(expected_wait([Some(ms(10)), Some(ms(8))]), Some(ms(8)));
        assert_eq!(expected_wait([Some(ms(8)), Some(ms(40))]), None);
        assert_eq!(expected_wait([Some(ms(11)), Some(ms(8))]), None);
    }

    /// The completion wait's long sleep: none without a last execution or near its three
    /// quarters; otherwise up to them, and never past the deadline.
    #[test]
    fn the_long_sleep_stops_short_of_the_last_executions_time_and_the_deadline() {
        let us = Duration::from_micros;
        let hour = Duration::from_secs(3600);
        assert_eq!(long_sleep(us(0), None, hour), None);
        assert_eq!(long_sleep(us(0), Some(us(8000)), hour), Some(us(6000)));
        assert_eq!(long_sleep(us(1000), Some(us(8000)), hour), Some(us(5000)));
        assert_eq!(long_sleep(us(5900), Some(us(8000)), hour), None);
        assert_eq!(long_sleep(us(7000), Some(us(8000)), hour), None);
        // A short execution: three quarters of it is within LONG_SLEEP_MIN.
        assert_eq!(long_sleep(us(0), Some(us(240)), hour), None);
        assert_eq!(long_sleep(us(0), Some(us(8000)), us(300)), Some(us(300)));
    }
}
