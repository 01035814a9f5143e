//! The discrete-event queue: events ordered by (device time, insertion sequence).
//!
//! The sequence number breaks ties between events due at the same time in the order they were
//! scheduled, so a run is bit-for-bit deterministic; the event payload is never compared.

use crate::time::Ps;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

#[derive(Debug)]
struct Entry<E> {
    at: Ps,
    seq: u64,
    ev: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// A min-queue of events by (time, sequence).
#[derive(Debug)]
pub struct EventQueue<E> {
    seq: u64,
    /// An event earlier than every event in `heap`, kept out of it: a handler mostly schedules
    /// its engine's next step sooner than anything pending, and that event is the next one
    /// popped, so it need not go through the heap (a push and a pop, each a sift).
    first: Option<Entry<E>>,
    heap: BinaryHeap<Reverse<Entry<E>>>,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            seq: 0,
            first: None,
            heap: BinaryHeap::new(),
        }
    }
}

impl<E> EventQueue<E> {
    /// Schedule `ev` at `at`, after every event already scheduled for the same time.
    pub fn push(&mut self, at: Ps, ev: E) {
        self.seq += 1;
        let e = Entry {
            at,
            seq: self.seq,
            ev,
        };
        // The newest sequence number: `e` comes first only where its time is earlier.
        let earliest = match &self.first {
            Some(f) => e < *f,
            None => self.heap.peek().is_none_or(|Reverse(h)| e < *h),
        };
        if earliest {
            if let Some(f) = self.first.replace(e) {
                self.heap.push(Reverse(f));
            }
        } else {
            self.heap.push(Reverse(e));
        }
    }

    /// The earliest event and its time.
    pub fn pop(&mut self) -> Option<(Ps, E)> {
        self.first
            .take()
            .or_else(|| self.heap.pop().map(|Reverse(e)| e))
            .map(|e| (e.at, e.ev))
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_none() && self.heap.is_empty()
    }

    pub fn len(&self) -> usize {
        self.heap.len() + usize::from(self.first.is_some())
    }

    /// Keep only the events `keep` accepts (their order is unchanged).
    pub fn retain(&mut self, mut keep: impl FnMut(&E) -> bool) {
        if self.first.as_ref().is_some_and(|f| !keep(&f.ev)) {
            self.first = None;
        }
        self.heap.retain(|Reverse(e)| keep(&e.ev));
    }

    /// The events still pending, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Ps, &E)> {
        self.first
            .iter()
            .chain(self.heap.iter().map(|Reverse(e)| e))
            .map(|e| (e.at, &e.ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_first_then_insertion_order() {
        let mut q = EventQueue::default();
        q.push(Ps(20), "late");
        q.push(Ps(10), "first at 10");
        q.push(Ps(10), "second at 10");
        q.push(Ps(0), "now");
        q.push(Ps(10), "third at 10");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            [
                (Ps(0), "now"),
                (Ps(10), "first at 10"),
                (Ps(10), "second at 10"),
                (Ps(10), "third at 10"),
                (Ps(20), "late"),
            ]
        );
    }

    /// Against a plain sorted list, 20,000 random pushes (times drawn from a narrow range, so
    /// ties are common, and sometimes earlier than everything pending) and pops interleaved,
    /// with a retain now and then: the same events in the same order, and the same lengths.
    #[test]
    fn pops_follow_time_then_insertion_order_under_random_traffic() {
        let mut q = EventQueue::default();
        let mut model: Vec<(u64, u64, u32)> = Vec::new(); // (time, seq, value)
        let (mut seq, mut s) = (0u64, 0x2545_f491_4f6c_dd1du64);
        let mut rnd = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut now = 0u64;
        for i in 0..20_000u32 {
            let r = rnd();
            match r % 10 {
                0..=4 => {
                    let at = now + (r >> 8) % 6;
                    seq += 1;
                    q.push(Ps(at), i);
                    model.push((at, seq, i));
                }
                5..=8 => {
                    model.sort();
                    let want = (!model.is_empty()).then(|| model.remove(0));
                    let got = q.pop();
                    assert_eq!(got, want.map(|(t, _, v)| (Ps(t), v)), "pop {i}");
                    if let Some((t, _)) = got {
                        now = t.0;
                    }
                }
                _ => {
                    let m = (r >> 16) % 3 + 2;
                    q.retain(|v| v % m as u32 != 0);
                    model.retain(|(_, _, v)| v % m as u32 != 0);
                }
            }
            assert_eq!(q.len(), model.len());
            assert_eq!(q.is_empty(), model.is_empty());
            assert_eq!(q.iter().count(), model.len());
        }
    }

    #[test]
    fn retain_keeps_the_order_of_survivors() {
        let mut q = EventQueue::default();
        for i in 0..10u32 {
            q.push(Ps(u64::from(i % 3)), i);
        }
        q.retain(|v| v % 2 == 0);
        assert_eq!(q.len(), 5);
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, v)| v).collect();
        assert_eq!(order, [0, 6, 4, 2, 8]);
    }
}
