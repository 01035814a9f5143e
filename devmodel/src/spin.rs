//! Waiting by spinning: a thread that expects its event within microseconds polls for it,
//! offering its CPU to other threads every 64 turns, rather than sleeping at once (waking a
//! sleeping thread took 10-400 µs on a 2-CPU VM whose idle vCPU halts, `docs/performance.md`).

use std::time::Instant;

/// Poll `done` until it holds (true) or `deadline` passes (false), offering the CPU every 64
/// turns (when the clock is also read).
pub fn until(mut done: impl FnMut() -> bool, deadline: Instant) -> bool {
    let mut turns = 0u32;
    loop {
        if done() {
            return true;
        }
        turns = turns.wrapping_add(1);
        if turns.is_multiple_of(64) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn it_ends_when_the_condition_holds_or_at_the_deadline() {
        let mut n = 0;
        assert!(until(
            || {
                n += 1;
                n == 200
            },
            Instant::now() + Duration::from_secs(60)
        ));
        assert_eq!(n, 200, "polled after it held");
        let t0 = Instant::now();
        assert!(!until(|| false, t0 + Duration::from_millis(2)));
        assert!(t0.elapsed() >= Duration::from_millis(2));
        // A deadline already past: one round of 64 turns at most.
        let mut polls = 0;
        assert!(!until(
            || {
                polls += 1;
                false
            },
            t0
        ));
        assert_eq!(polls, 64);
    }
}
