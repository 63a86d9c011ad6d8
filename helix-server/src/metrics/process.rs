//! The process as Linux sees it (`/proc/self`): memory, CPU time, open
//! files and threads. Read at scrape time; absent fields stay None off
//! Linux.

use std::time::Duration;

/// Clock ticks per second of `/proc/<pid>/stat` times (USER_HZ, fixed at
/// 100 by the Linux ABI whatever the kernel's own tick rate).
const USER_HZ: f64 = 100.0;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    /// Resident memory (VmRSS), its anonymous part (RssAnon: heap and
    /// stacks, not the mapped log files) and its peak (VmHWM), in bytes.
    pub rss_bytes: Option<u64>,
    pub rss_anon_bytes: Option<u64>,
    pub rss_peak_bytes: Option<u64>,
    /// User + system CPU time.
    pub cpu: Option<Duration>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub threads: Option<u64>,
}

impl ProcessStats {
    pub fn read() -> ProcessStats {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kib = |key: &str| status_field(&status, key).map(|v| v * 1024);
        ProcessStats {
            rss_bytes: kib("VmRSS:"),
            rss_anon_bytes: kib("RssAnon:"),
            rss_peak_bytes: kib("VmHWM:"),
            cpu: std::fs::read_to_string("/proc/self/stat")
                .ok()
                .and_then(|s| cpu_time(&s)),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|d| d.count() as u64),
            max_fds: std::fs::read_to_string("/proc/self/limits")
                .ok()
                .and_then(|s| max_open_files(&s)),
            threads: status_field(&status, "Threads:"),
        }
    }
}

/// The number after `key` in /proc/self/status ("VmRSS:   1234 kB").
fn status_field(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// utime + stime from /proc/self/stat (fields 14 and 15; the command name
/// in field 2 may hold spaces, so count from its closing parenthesis).
fn cpu_time(stat: &str) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, index 11.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_secs_f64((utime + stime) as f64 / USER_HZ))
}

fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_procfs_lines() {
        let status =
            "Name:\thelix\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t 512 kB\nThreads:\t9\n";
        assert_eq!(status_field(status, "VmRSS:"), Some(1024));
        assert_eq!(status_field(status, "Threads:"), Some(9));
        assert_eq!(status_field(status, "VmSwap:"), None);
        let stat = "42 (helix server) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0";
        assert_eq!(cpu_time(stat), Some(Duration::from_secs(3)));
        let limits = "Limit Soft Hard Units\nMax open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
    }

    #[test]
    fn this_process_is_readable_on_linux() {
        let p = ProcessStats::read();
        if cfg!(target_os = "linux") {
            assert!(p.rss_bytes.is_some_and(|r| r > 0), "{p:?}");
            assert!(p.open_fds.is_some_and(|n| n > 0), "{p:?}");
            assert!(p.cpu.is_some(), "{p:?}");
        }
    }
}
