//! Polling the notification queues for what the device posts: the back-off between polls
//! while an execution (or the load's prologue) runs, and the one long sleep an execution's
//! wait takes where the model's last executions say how long it will run.

use std::time::Duration;

/// Polling for an execution's end: while well short of what the last executions took
/// (`expected`, [`expected_wait`]), sleep most of the rest in one go; then as [`back_off`].
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
        None => back_off(spins, progressed),
    }
}

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
