//! Where the data-path helpers run from the threads they help, as their joins tell it: how
//! soon after a post a spinning helper holds the job ([`NEAR_NS`]), and from the last
//! [`WINDOW`] such joins whether its cache is far from the caller's ([`far`]), with the
//! time spent far (for `bench real`). Only host time depends on it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Within how long of a post a spinning helper that takes the job counts as near: where
/// the helper's cache is near the caller's. On the 2-vCPU VM of `docs/performance.md`
/// (2026-12-06, fourteenth session) the host ran the two vCPUs on cores sharing a
/// last-level cache or not, switching every few seconds to minutes; per run, the median
/// time from the caller's stamp after its post to the helper's once it held the job was
/// 30-71 ns in the first placement and 230-271 ns in the second, where
/// akc-baseline_bf16_s512 ran 1.4-1.7x slower. (Stamping the helper's first sight of the
/// post instead, one cache line's crossing rather than three, did not tell them apart.)
/// `bench real` reports the share of prompt joins, so a slow run says which it had.
pub const NEAR_NS: u64 = 150;

/// The joins the placement remembers, and how few of them may have been prompt to enter
/// the far state; it is left when the last [`LEAVE_FAR`] were all prompt. Near, three or
/// four joins in five are prompt, in runs broken by a helper that was late for its own
/// reasons; far, none is.
const WINDOW: u32 = 16;
const ENTER_FAR: u32 = 2;
const LEAVE_FAR: u32 = 3;

/// Where the helpers are from their callers, from the last [`WINDOW`] timed joins: bit `i`
/// of the low bits set where the `i`-th newest was prompt, bit [`WINDOW`] the far state.
/// Only host time depends on it: a step's pieces give the same results on any thread.
static PLACEMENT: AtomicU32 = AtomicU32::new(NEAR_START);
const FAR_BIT: u32 = 1 << WINDOW;
/// Near, every remembered join prompt: a new process's state.
const NEAR_START: u32 = FAR_BIT - 1;

/// Nanoseconds spent far in finished far spells, and when the current one began (0: near).
static FAR_NS: AtomicU64 = AtomicU64::new(0);
static FAR_SINCE: AtomicU64 = AtomicU64::new(0);

/// The placement word after one more timed join (`prompt`: within [`NEAR_NS`]).
fn placement_after(word: u32, prompt: bool) -> u32 {
    let window = ((word << 1) | u32::from(prompt)) & (FAR_BIT - 1);
    let last = (1u32 << LEAVE_FAR) - 1;
    let far = if word & FAR_BIT != 0 {
        window & last != last
    } else {
        window.count_ones() <= ENTER_FAR
    };
    window | if far { FAR_BIT } else { 0 }
}

/// Record one more timed join (`prompt`: within [`NEAR_NS`]), and the far time it ends or
/// begins.
pub(super) fn note_join(prompt: bool) {
    let Ok(was) = PLACEMENT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
        Some(placement_after(w, prompt))
    }) else {
        return;
    };
    let (far_before, far_now) = (
        was & FAR_BIT != 0,
        placement_after(was, prompt) & FAR_BIT != 0,
    );
    if !far_before && far_now {
        FAR_SINCE.store(stamp(), Ordering::Relaxed);
    } else if far_before && !far_now {
        let since = FAR_SINCE.swap(0, Ordering::Relaxed);
        if since != 0 {
            FAR_NS.fetch_add(stamp().saturating_sub(since), Ordering::Relaxed);
        }
    }
}

/// Whether the helpers' caches are far from their callers' now ([`NEAR_NS`]): steps then
/// run as on one thread ([`super::workers`]).
pub fn far() -> bool {
    PLACEMENT.load(Ordering::Relaxed) & FAR_BIT != 0
}

/// Nanoseconds since the first stamp in this process (never 0, which a job's `joined`
/// keeps for "not taken"): the clock of posts and joins.
pub(super) fn stamp() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let e = *EPOCH.get_or_init(Instant::now);
    u64::try_from(e.elapsed().as_nanos()).map_or(u64::MAX, |n| n.max(1))
}

/// Whether a join `joined` (a helper's stamp once it held the job) was within [`NEAR_NS`]
/// of the caller's stamp after its post, `posted`; None where no helper took the job.
pub(super) fn prompt(posted: u64, joined: u64) -> Option<bool> {
    (joined != 0).then(|| joined.saturating_sub(posted) <= NEAR_NS)
}

/// Nanoseconds the helpers have been far in this process, the current far spell included.
pub(super) fn far_ns() -> u64 {
    FAR_NS
        .load(Ordering::Relaxed)
        .saturating_add(match FAR_SINCE.load(Ordering::Relaxed) {
            0 => 0,
            since => stamp().saturating_sub(since),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A join counts as prompt within `NEAR_NS` of the post (or before the caller's stamp
    /// after it), and not at all where no helper took the job; a stamp is never 0 (a job's
    /// "not taken").
    #[test]
    fn joins_are_prompt_within_near_ns() {
        assert_eq!(prompt(1_000, 0), None);
        assert_eq!(prompt(1_000, 1_000 + NEAR_NS), Some(true));
        assert_eq!(prompt(1_000, 1_001 + NEAR_NS), Some(false));
        assert_eq!(
            prompt(1_000, 900),
            Some(true),
            "seen as the stamp was taken"
        );
        assert!(stamp() > 0);
    }

    /// Far is entered when at most `ENTER_FAR` of the last `WINDOW` timed joins were
    /// prompt, and left only when the last `LEAVE_FAR` all were.
    #[test]
    fn the_placement_goes_far_and_comes_back_on_timed_joins() {
        let run = |mut w: u32, joins: &[bool]| {
            for &j in joins {
                w = placement_after(w, j);
            }
            w
        };
        let is_far = |w: u32| w & FAR_BIT != 0;
        assert!(!is_far(NEAR_START));
        // Near runs are broken by late joins: one prompt join in four keeps it near.
        let mixed: Vec<bool> = (0..64).map(|i| i % 4 == 0).collect();
        assert!(!is_far(run(NEAR_START, &mixed)));
        // Thirteen late joins in a row are not yet far (three prompt ones remembered)...
        let w = run(NEAR_START, &[false; 13]);
        assert!(!is_far(w));
        // ...the fourteenth is.
        let w = placement_after(w, false);
        assert!(is_far(w));
        // Far stays far on mixed joins, and on two prompt ones in a row...
        assert!(is_far(run(w, &mixed)));
        assert!(is_far(run(w, &[true, true, false, true, true])));
        // ...and is left on the third.
        assert!(!is_far(run(w, &[true, true, true])));
        // Just back near, it takes the window's late joins again to go far.
        let back = run(w, &[true, true, true]);
        assert!(!is_far(run(back, &[false; 13])));
        assert!(is_far(run(back, &[false; 14])));
    }
}
