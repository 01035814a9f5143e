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
    heap: BinaryHeap<Reverse<Entry<E>>>,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            seq: 0,
            heap: BinaryHeap::new(),
        }
    }
}

impl<E> EventQueue<E> {
    /// Schedule `ev` at `at`, after every event already scheduled for the same time.
    pub fn push(&mut self, at: Ps, ev: E) {
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            at,
            seq: self.seq,
            ev,
        }));
    }

    /// The earliest event and its time.
    pub fn pop(&mut self) -> Option<(Ps, E)> {
        self.heap.pop().map(|Reverse(e)| (e.at, e.ev))
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Keep only the events `keep` accepts (their order is unchanged).
    pub fn retain(&mut self, mut keep: impl FnMut(&E) -> bool) {
        self.heap.retain(|Reverse(e)| keep(&e.ev));
    }

    /// The events still pending, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Ps, &E)> {
        self.heap.iter().map(|Reverse(e)| (e.at, &e.ev))
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
