//! Host memory and progress of `neuron-emu run`: what a run will need against the machine's
//! `MemAvailable` (checked before a big run), and a progress display for long runs.

use std::io::IsTerminal;
use std::time::Instant;

/// Runs needing more host memory than this print their estimate before they start.
pub(crate) const BIG_RUN: u64 = 1 << 30;

/// What the process holds besides the model's bytes: code, the NEFF, the device's SBUF and
/// PSUM pages a kernel touches, block buffers. Measured: 13-25 MiB peak RSS for the small
/// fixtures, 133 MiB beyond the tensors for `nkipy-matmul_large`.
pub(crate) const FIXED_OVERHEAD: u64 = 256 << 20;

/// The host memory a run needs, by part (bytes).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Need {
    pub(crate) inputs: u64,
    pub(crate) outputs: u64,
    /// Everything else the load allocated on the device (programs, rings, scratch): an upper
    /// bound, as untouched device memory takes no host memory.
    pub(crate) other: u64,
    /// Transient copies while `.npy` input files are read and converted (the largest file).
    pub(crate) files: u64,
}

impl Need {
    pub(crate) fn total(&self) -> u64 {
        self.inputs
            .saturating_add(self.outputs)
            .saturating_add(self.other)
            .saturating_add(self.files)
            .saturating_add(FIXED_OVERHEAD)
    }
}

/// `MemAvailable` of `/proc/meminfo` in bytes (`NEURON_EMU_MEMINFO` names another file in
/// meminfo's format, for tests), or None where it cannot be read.
pub(crate) fn mem_available() -> Option<u64> {
    let path = std::env::var_os("NEURON_EMU_MEMINFO").unwrap_or_else(|| "/proc/meminfo".into());
    proc_kib_field(&std::fs::read_to_string(path).ok()?, "MemAvailable")
}

/// The `key:   N kB` line of a `/proc` file's text (`/proc/meminfo`, `/proc/self/status`), in
/// bytes.
pub(crate) fn proc_kib_field(text: &str, key: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|l| l.strip_prefix(key).is_some_and(|r| r.starts_with(':')))?;
    let kib: u64 = line[key.len() + 1..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

pub(crate) fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

/// Before a run: print the estimate when it is big, and refuse (Err with the reason) when it
/// exceeds `MemAvailable`, unless `force`.
pub(crate) fn check(need: &Need, force: bool) -> Result<(), String> {
    let total = need.total();
    if total <= BIG_RUN {
        return Ok(());
    }
    let avail = mem_available();
    eprintln!(
        "memory: this run needs about {} of host memory (inputs {}, outputs {}, other device data up to {}{}, fixed {}); MemAvailable {}",
        gib(total),
        gib(need.inputs),
        gib(need.outputs),
        gib(need.other),
        if need.files > 0 {
            format!(", reading input files {}", gib(need.files))
        } else {
            String::new()
        },
        gib(FIXED_OVERHEAD),
        avail.map_or("unknown".to_string(), gib)
    );
    match avail {
        Some(a) if a < total && !force => Err(format!(
            "not enough host memory: the run needs about {} and {} is available (MemAvailable); free memory or pass --no-memory-check to run anyway",
            gib(total),
            gib(a)
        )),
        _ => Ok(()),
    }
}

/// Progress of a run's phases on stderr: an indicatif bar on a terminal; with `--progress`
/// and no terminal, a line per phase and per tenth of its bytes. Never on stdout.
#[derive(Debug)]
pub(crate) struct Progress {
    mode: Mode,
    started: Instant,
}

#[derive(Debug)]
enum Mode {
    Off,
    Bar(indicatif::ProgressBar),
    Lines {
        what: &'static str,
        total: u64,
        done: u64,
        tenth: u64,
    },
}

impl Progress {
    /// On for `--progress`, or on a terminal when the run moves at least `bytes` >= 256 MiB
    /// (smaller runs take well under a few seconds).
    pub(crate) fn new(forced: bool, bytes: u64) -> Progress {
        let tty = std::io::stderr().is_terminal();
        let mode = if tty && (forced || bytes >= 256 << 20) {
            Mode::Bar(indicatif::ProgressBar::hidden())
        } else if forced {
            Mode::Lines {
                what: "",
                total: 0,
                done: 0,
                tenth: 0,
            }
        } else {
            Mode::Off
        };
        Progress {
            mode,
            started: Instant::now(),
        }
    }

    /// Start a phase moving `total` bytes (0: a phase without a byte count, a spinner).
    pub(crate) fn phase(&mut self, what: &'static str, total: u64) {
        match &mut self.mode {
            Mode::Off => {}
            Mode::Bar(b) => {
                b.finish_and_clear();
                let nb = if total > 0 {
                    let nb = indicatif::ProgressBar::with_draw_target(
                        Some(total),
                        indicatif::ProgressDrawTarget::stderr(),
                    );
                    nb.set_style(
                        indicatif::ProgressStyle::with_template(
                            "{elapsed_precise} {msg:9} [{bar:40}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, eta {eta})",
                        )
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                        .progress_chars("=> "),
                    );
                    nb
                } else {
                    let nb = indicatif::ProgressBar::with_draw_target(
                        None,
                        indicatif::ProgressDrawTarget::stderr(),
                    );
                    nb.set_style(
                        indicatif::ProgressStyle::with_template(
                            "{elapsed_precise} {msg:9} {spinner}",
                        )
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
                    );
                    nb.enable_steady_tick(std::time::Duration::from_millis(200));
                    nb
                };
                nb.set_message(what);
                *b = nb;
            }
            Mode::Lines {
                what: w,
                total: t,
                done,
                tenth,
            } => {
                eprintln!(
                    "progress: {what}{} ({:.1} s)",
                    if total > 0 {
                        format!(" {}", gib(total))
                    } else {
                        String::new()
                    },
                    self.started.elapsed().as_secs_f64()
                );
                (*w, *t, *done, *tenth) = (what, total, 0, 0);
            }
        }
    }

    /// `n` more bytes of the current phase done.
    pub(crate) fn inc(&mut self, n: u64) {
        match &mut self.mode {
            Mode::Off => {}
            Mode::Bar(b) => b.inc(n),
            Mode::Lines {
                what,
                total,
                done,
                tenth,
            } => {
                *done = done.saturating_add(n);
                if *total == 0 {
                    return;
                }
                let t = (*done).min(*total) * 10 / *total;
                if t > *tenth {
                    *tenth = t;
                    eprintln!(
                        "progress: {what} {}% ({:.1} s)",
                        t * 10,
                        self.started.elapsed().as_secs_f64()
                    );
                }
            }
        }
    }

    pub(crate) fn finish(&mut self) {
        if let Mode::Bar(b) = &self.mode {
            b.finish_and_clear();
        }
        if let Mode::Lines { .. } = self.mode {
            eprintln!(
                "progress: done ({:.1} s)",
                self.started.elapsed().as_secs_f64()
            );
        }
        self.mode = Mode::Off;
    }
}

#[cfg(test)]
mod tests {
    use super::proc_kib_field;

    #[test]
    fn proc_fields_are_read_in_bytes_and_only_by_their_whole_key() {
        let t = "MemTotal:       24000000 kB\nMemAvailableX:  1 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(proc_kib_field(t, "MemAvailable"), Some(2048 * 1024));
        assert_eq!(
            proc_kib_field("VmHWM:\t  12 kB\n", "VmHWM"),
            Some(12 * 1024)
        );
        assert_eq!(proc_kib_field(t, "VmHWM"), None);
        assert_eq!(proc_kib_field("VmHWM: lots kB\n", "VmHWM"), None);
        assert_eq!(
            proc_kib_field("VmHWM: 99999999999999999999 kB\n", "VmHWM"),
            None
        );
    }
}
