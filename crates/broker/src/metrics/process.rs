//! The broker's own process, as every Prometheus client library exports
//! it (`process_cpu_seconds_total`, `process_resident_memory_bytes`, …),
//! read from `/proc/self` when a scrape asks. Parsing is pure
//! ([`parse_stat`]); [`ProcessGauges::read`] is the one place that reads.

/// The broker process's standard metrics.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ProcessGauges {
    /// User and system CPU time used, seconds.
    pub cpu_seconds: f64,
    /// Resident set size, bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// Descriptors open now.
    pub open_fds: u64,
    /// The soft limit on open descriptors (`None`: unlimited).
    pub max_fds: Option<u64>,
    /// When the process started, seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// What `/proc/self/stat` says, given the boot time (`btime` of
/// `/proc/stat`, Unix seconds), the clock-tick rate and the page size:
/// (CPU seconds, start time in Unix seconds, virtual bytes, resident
/// bytes). `None` when the text is not a stat line.
pub fn parse_stat(
    stat: &str,
    boot_time: u64,
    ticks_per_s: u64,
    page: u64,
) -> Option<(f64, f64, u64, u64)> {
    // The command name may hold spaces and parentheses: fields start after
    // the last ')'. Field 3 (the state) is the first of `rest`.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    let ticks = ticks_per_s.max(1) as f64;
    let cpu = (num(11)? + num(12)?) as f64 / ticks;
    let start = boot_time as f64 + num(19)? as f64 / ticks;
    Some((cpu, start, num(20)?, num(21)? * page))
}

/// The `btime` line of `/proc/stat`: when the machine booted, Unix seconds.
pub fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

impl ProcessGauges {
    /// Reads this process's gauges (`None`: `/proc` unreadable).
    pub fn read() -> Option<ProcessGauges> {
        // The boot time never changes: read once, not at every scrape.
        static BOOT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        let boot =
            (*BOOT.get_or_init(|| parse_boot_time(&std::fs::read_to_string("/proc/stat").ok()?)))?;
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let ticks = rustix::param::clock_ticks_per_second();
        let page = rustix::param::page_size() as u64;
        let (cpu_seconds, start_time_seconds, virtual_bytes, resident_bytes) =
            parse_stat(&stat, boot, ticks, page)?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        let max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        Some(ProcessGauges {
            cpu_seconds,
            resident_bytes,
            virtual_bytes,
            open_fds,
            max_fds,
            start_time_seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_cpu_start_and_memory() {
        // A command name with a space and a parenthesis; 250 + 50 ticks of
        // CPU at 100 Hz, started 1234 ticks after boot, 8 MiB virtual,
        // 300 pages resident.
        let stat = "4242 (allot (x) d) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 50 0 0 20 0 3 0 1234 8388608 300 18446744073709551615";
        let (cpu, start, virt, rss) = parse_stat(stat, 1_700_000_000, 100, 4096).unwrap();
        assert!((cpu - 3.0).abs() < 1e-9);
        assert!((start - 1_700_000_012.34).abs() < 1e-6);
        assert_eq!((virt, rss), (8_388_608, 300 * 4096));
        assert_eq!(parse_stat("garbage", 0, 100, 4096), None);
        assert_eq!(parse_stat("1 (x) S 1 2", 0, 100, 4096), None);
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_boot_time("cpu 1\n"), None);
    }

    #[test]
    fn this_process_reads_itself() {
        let g = ProcessGauges::read().expect("/proc/self");
        assert!(g.open_fds >= 3 && g.resident_bytes > 0 && g.virtual_bytes >= g.resident_bytes);
        assert!(g.start_time_seconds > 1_500_000_000.0, "{g:?}");
    }
}
