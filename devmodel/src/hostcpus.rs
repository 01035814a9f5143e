//! The host's CPU count, asked once a process: `std::thread::available_parallelism` reads
//! the cgroup's CPU quota files at every call, and a fault campaign asked at every device it
//! made (1.5% of its CPU, `docs/performance.md`, nineteenth session). A process moved to
//! fewer CPUs later keeps the first answer (a choice of threads, never of results).

use std::sync::OnceLock;

/// CPUs this process may run on (1 where the host does not say).
pub fn host_cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_count_is_the_hosts_and_stays() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(super::host_cpus(), n);
        assert_eq!(super::host_cpus(), n);
    }
}
