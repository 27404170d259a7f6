//! What `/proc` says about a process: CPU time (`utime + stime` from `/proc/<pid>/stat`), peak
//! and current memory (`VmHWM`, `VmRSS` from `/proc/<pid>/status`), a process and its
//! descendants (nginx's workers), the clock tick. Readings only: nothing here starts or stops
//! a process. A process that is gone reads as `None`.

use std::process::Command;

/// Clock ticks per second (`getconf CLK_TCK`; 100 where that fails, as on every Linux we know).
pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// The fields of `/proc/<pid>/stat` after the command name: index 0 is field 3 (state).
pub(crate) fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = text.rsplit_once(')')?.1;
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// CPU time of a process, in clock ticks: in the program (`utime`) and in the kernel on its
/// behalf (`stime`: system calls, the TCP stack, scheduling).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ticks {
    pub user: u64,
    pub system: u64,
}

impl Ticks {
    pub fn total(self) -> u64 {
        self.user + self.system
    }

    /// What was used between `before` and `self`.
    pub fn since(self, before: Ticks) -> Ticks {
        Ticks {
            user: self.user.saturating_sub(before.user),
            system: self.system.saturating_sub(before.system),
        }
    }
}

impl std::iter::Sum for Ticks {
    fn sum<I: Iterator<Item = Ticks>>(iter: I) -> Ticks {
        iter.fold(Ticks::default(), |a, b| Ticks {
            user: a.user + b.user,
            system: a.system + b.system,
        })
    }
}

/// utime and stime of one process (all its threads, living and dead).
pub fn cpu_ticks(pid: u32) -> Option<Ticks> {
    let f = stat_fields(pid)?;
    Some(Ticks {
        user: f.get(11)?.parse().ok()?,
        system: f.get(12)?.parse().ok()?,
    })
}

/// `pid` and all its descendants.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(ppid) = stat_fields(p).and_then(|f| f.get(1)?.parse::<u32>().ok()) {
                parent_of.push((p, ppid));
            }
        }
    }
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let parent = all[i];
        all.extend(
            parent_of
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    all
}

/// CPU ticks of a process tree.
pub fn tree_cpu_ticks(pids: &[u32]) -> Ticks {
    pids.iter().filter_map(|p| cpu_ticks(*p)).sum()
}

/// `VmHWM` (peak resident set) of one process, in KiB.
pub fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status_kib(&text, "VmHWM:")
}

/// `VmRSS` (resident set now) of one process, in KiB.
pub fn vm_rss_kib(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status_kib(&text, "VmRSS:")
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), in KiB.
pub fn mem_total_kib() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_status_kib(&text, "MemTotal:")
}

fn parse_status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_our_own_process() {
        let me = std::process::id();
        assert!(cpu_ticks(me).is_some());
        assert!(vm_hwm_kib(me).unwrap() > 0);
        assert_eq!(tree(me)[0], me);
        assert!(clock_ticks() > 0.0);
    }

    #[test]
    fn ticks_add_up_and_subtract_per_kind() {
        let a = Ticks { user: 7, system: 3 };
        let b = Ticks { user: 2, system: 5 };
        let sum: Ticks = [a, b].into_iter().sum();
        assert_eq!(sum, Ticks { user: 9, system: 8 });
        assert_eq!(sum.since(a), b);
        // A process that left the tree between readings never makes the difference negative.
        assert_eq!(a.since(sum), Ticks::default());
        assert_eq!(sum.total(), 17);
    }

    #[test]
    fn parses_status_lines() {
        let s = "Name:\thopwise\nVmPeak:\t  10 kB\nVmHWM:\t    4321 kB\nVmRSS:\t 4000 kB\n";
        assert_eq!(parse_status_kib(s, "VmHWM:"), Some(4321));
        assert_eq!(parse_status_kib(s, "VmSwap:"), None);
    }
}
