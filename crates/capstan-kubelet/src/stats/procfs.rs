//! The node's own figures from `/proc`: CPU time (`/proc/stat`), memory (`/proc/meminfo`,
//! `/proc/vmstat`), network interfaces (`/proc/<pid>/net/dev`, per network namespace), the
//! boot time and process counts.

/// The kernel's `USER_HZ`, the unit of `/proc/stat`: 100 on every Linux architecture.
const USER_HZ: u64 = 100;

/// What `/proc/stat` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// CPU time spent on anything but idling, all CPUs, in nanoseconds (user, nice, system,
    /// irq, softirq and steal time; guest time is already inside user time).
    pub cpu_busy_ns: u64,
    /// The boot time, seconds since the Unix epoch (`btime`).
    pub boot_time: Option<i64>,
}

/// Parses `/proc/stat`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let mut stat = ProcStat::default();
    let mut found = false;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("cpu") => {
                let ticks: Vec<u64> = fields.filter_map(|f| f.parse().ok()).collect();
                // user nice system idle iowait irq softirq steal guest guest_nice
                let busy: u64 = [0, 1, 2, 5, 6, 7]
                    .iter()
                    .filter_map(|&i| ticks.get(i))
                    .sum();
                stat.cpu_busy_ns = busy.saturating_mul(1_000_000_000 / USER_HZ);
                found = ticks.len() >= 4;
            }
            Some("btime") => stat.boot_time = fields.next().and_then(|v| v.parse().ok()),
            _ => {}
        }
    }
    found.then_some(stat)
}

/// What `/proc/meminfo` says, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// `MemTotal`.
    pub total: u64,
    /// `MemFree`.
    pub free: u64,
    /// `Inactive(file)`.
    pub inactive_file: u64,
    /// `AnonPages`.
    pub anon: u64,
    /// `Cached`.
    pub cached: u64,
}

impl MemInfo {
    /// Memory in use, page cache included (`MemTotal - MemFree`), as cAdvisor counts the
    /// root cgroup's usage.
    pub fn usage(&self) -> u64 {
        self.total.saturating_sub(self.free)
    }

    /// The usage less the inactive file cache.
    pub fn working_set(&self) -> u64 {
        self.usage().saturating_sub(self.inactive_file)
    }
}

/// Parses `/proc/meminfo`.
pub fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let mut info = MemInfo::default();
    let mut total = false;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let Some(kib) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
        else {
            continue;
        };
        let bytes = kib.saturating_mul(1024);
        match key {
            "MemTotal" => {
                info.total = bytes;
                total = true;
            }
            "MemFree" => info.free = bytes,
            "Inactive(file)" => info.inactive_file = bytes,
            "AnonPages" => info.anon = bytes,
            "Cached" => info.cached = bytes,
            _ => {}
        }
    }
    total.then_some(info)
}

/// `pgfault` and `pgmajfault` of `/proc/vmstat`.
pub fn parse_vmstat_faults(text: &str) -> (Option<u64>, Option<u64>) {
    let mut faults = (None, None);
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match (fields.next(), fields.next().and_then(|v| v.parse().ok())) {
            (Some("pgfault"), Some(v)) => faults.0 = Some(v),
            (Some("pgmajfault"), Some(v)) => faults.1 = Some(v),
            _ => {}
        }
    }
    faults
}

/// One interface's counters from `net/dev`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    /// The interface's name.
    pub name: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Received packets dropped.
    pub rx_dropped: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// Sent packets dropped.
    pub tx_dropped: u64,
}

/// Parses a `net/dev` table, leaving out the interfaces cAdvisor ignores (loopback, the
/// host ends of veth pairs, docker's and nerdctl's bridges).
pub fn parse_net_dev(text: &str) -> Vec<Interface> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, counters) = line.split_once(':')?;
            let name = name.trim();
            if name == "lo"
                || ["veth", "docker", "nerdctl"]
                    .iter()
                    .any(|p| name.starts_with(p))
            {
                return None;
            }
            let c: Vec<u64> = counters
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            if c.len() < 12 {
                return None;
            }
            Some(Interface {
                name: name.to_owned(),
                rx_bytes: c[0],
                rx_packets: c[1],
                rx_errors: c[2],
                rx_dropped: c[3],
                tx_bytes: c[8],
                tx_packets: c[9],
                tx_errors: c[10],
                tx_dropped: c[11],
            })
        })
        .collect()
}

/// The number of threads on the node, the fourth field's denominator in `/proc/loadavg`
/// (`0.00 0.01 0.05 1/234 5678`), what `sysinfo`'s `procs` counts and upstream reports as
/// running processes.
pub fn parse_loadavg_threads(text: &str) -> Option<i64> {
    text.split_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse()
        .ok()
}

/// The source (device) of the mount holding `path`, from a `mountinfo` table: the mount
/// with the longest mount point containing `path` (the last such when several are stacked).
pub fn mount_source(mountinfo: &str, path: &std::path::Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.lines() {
        let Some((mount, rest)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mount_point) = mount.split_whitespace().nth(4) else {
            continue;
        };
        let Some(source) = rest.split_whitespace().nth(1) else {
            continue;
        };
        let mount_point = mount_point.replace("\\040", " ");
        if path.starts_with(&mount_point)
            && best
                .as_ref()
                .is_none_or(|(len, _)| mount_point.len() >= *len)
        {
            best = Some((mount_point.len(), source.to_owned()));
        }
    }
    best.map(|(_, source)| source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_gives_busy_time_and_boot_time() {
        let text = "cpu  100 5 50 1000 7 3 2 1 9 0\n\
                    cpu0 50 2 25 500 3 1 1 0 0 0\n\
                    intr 1 2 3\nbtime 1700000000\nprocesses 42\n";
        let stat = parse_stat(text).unwrap();
        // user + nice + system + irq + softirq + steal = 161 ticks of 10 ms.
        assert_eq!(stat.cpu_busy_ns, 1_610_000_000);
        assert_eq!(stat.boot_time, Some(1_700_000_000));
        assert_eq!(parse_stat("intr 1\n"), None);
    }

    #[test]
    fn meminfo_gives_usage_and_working_set() {
        let text = "MemTotal:       16384 kB\nMemFree:         4096 kB\n\
                    MemAvailable:   8192 kB\nCached:          3072 kB\n\
                    Inactive(file):  2048 kB\nAnonPages:       1024 kB\nHugePages_Total: 0\n";
        let info = parse_meminfo(text).unwrap();
        assert_eq!(info.total, 16384 * 1024);
        assert_eq!(info.usage(), 12288 * 1024);
        assert_eq!(info.working_set(), 10240 * 1024);
        assert_eq!(info.anon, 1024 * 1024);
        assert_eq!(info.cached, 3072 * 1024);
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn vmstat_gives_page_faults() {
        assert_eq!(
            parse_vmstat_faults("pgpgin 1\npgfault 300\npgmajfault 4\n"),
            (Some(300), Some(4))
        );
        assert_eq!(parse_vmstat_faults(""), (None, None));
    }

    #[test]
    fn net_dev_lists_the_interfaces_cadvisor_counts() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
             face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
             lo:  500       5    0    0    0     0          0         0      500       5    0    0    0     0       0          0\n  \
             eth0: 1000      10    1    2    0     0          0         0     2000      20    3    4    0     0       0          0\n\
             veth1234: 7 1 0 0 0 0 0 0 7 1 0 0 0 0 0 0\n\
             cni0: 9 1 0 0 0 0 0 0 9 1 0 0 0 0 0 0\n\
             bad: 1 2\n";
        let interfaces = parse_net_dev(text);
        assert_eq!(
            interfaces[0],
            Interface {
                name: "eth0".into(),
                rx_bytes: 1000,
                rx_packets: 10,
                rx_errors: 1,
                rx_dropped: 2,
                tx_bytes: 2000,
                tx_packets: 20,
                tx_errors: 3,
                tx_dropped: 4,
            }
        );
        let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["eth0", "cni0"]);
    }

    #[test]
    fn mounts_name_the_device_of_a_path() {
        let mountinfo = "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n\
                         30 22 0:26 / /var/lib/containerd rw - xfs /dev/vdb rw\n\
                         31 22 0:27 / /var/lib/c rw - tmpfs tmpfs rw\n";
        let source = |p: &str| mount_source(mountinfo, std::path::Path::new(p));
        assert_eq!(
            source("/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs").as_deref(),
            Some("/dev/vdb")
        );
        assert_eq!(source("/var/lib/cx").as_deref(), Some("/dev/vda1"));
        assert_eq!(source("/home").as_deref(), Some("/dev/vda1"));
        assert_eq!(mount_source("", std::path::Path::new("/")), None);
    }

    #[test]
    fn loadavg_gives_the_thread_count() {
        assert_eq!(
            parse_loadavg_threads("0.00 0.01 0.05 1/234 5678\n"),
            Some(234)
        );
        assert_eq!(parse_loadavg_threads("0.00"), None);
    }
}
