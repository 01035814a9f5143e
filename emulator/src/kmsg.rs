//! The emulated kernel log (what `dmesg` shows): lines the driver prints, such as the
//! `NEURON_HW_ERR=...` lines the runtime writes through `NEURON_IOCTL_PRINTK`
//! (`users-faults-and-tools.md` §2.3). Bounded: the oldest lines go first, as in the kernel's
//! ring buffer. Timestamps are the printing device's emulated time, so logs are reproducible.

use std::collections::VecDeque;

/// Most lines kept.
pub const MAX_LINES: usize = 4096;

/// One kernel-log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsgLine {
    /// Sequence number since the emulator started (never reused).
    pub seq: u64,
    /// Device time of the printing device, in picoseconds.
    pub time_ps: u64,
    /// The device whose driver printed it.
    pub device: usize,
    pub text: String,
}

impl KmsgLine {
    /// The line as `dmesg` prints it: `[seconds.micros] text`.
    pub fn dmesg(&self) -> String {
        let us = self.time_ps / 1_000_000;
        format!("[{:5}.{:06}] {}", us / 1_000_000, us % 1_000_000, self.text)
    }
}

/// The ring of lines.
#[derive(Debug, Default)]
pub struct Kmsg {
    next: u64,
    lines: VecDeque<KmsgLine>,
}

impl Kmsg {
    pub fn push(&mut self, device: usize, time_ps: u64, text: &str) {
        if self.lines.len() == MAX_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(KmsgLine {
            seq: self.next,
            time_ps,
            device,
            text: text.to_string(),
        });
        self.next += 1;
    }

    pub fn lines(&self) -> Vec<KmsgLine> {
        self.lines.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_formatted() {
        let mut k = Kmsg::default();
        for i in 0..MAX_LINES + 3 {
            k.push(0, 1_500_000_000_000, &format!("line {i}"));
        }
        let l = k.lines();
        assert_eq!(l.len(), MAX_LINES);
        assert_eq!(l[0].seq, 3);
        assert_eq!(l[0].dmesg(), "[    1.500000] line 3");
    }
}
