//! Reading a cgroup's CPU, memory and process counters, on either hierarchy: cgroup v2 (one
//! tree, `cpu.stat`, `memory.current`, `memory.stat`, `pids.current`) or cgroup v1 (a tree
//! per controller: `cpuacct.usage`/`cpuacct.stat`, `memory.usage_in_bytes`/`memory.stat`,
//! `pids.current`). Figures are derived as cAdvisor derives them: the working set is the usage
//! less the inactive file cache, RSS the anonymous memory.

use std::path::{Path, PathBuf};

/// The kernel's `USER_HZ`, the unit of `cpuacct.stat`: 100 on every Linux architecture.
const USER_HZ: u64 = 100;

/// The limit a cgroup v1 memory controller reports for "no limit" is near `i64::MAX`
/// (rounded down to a page); anything at least this large is no limit.
const V1_UNLIMITED: u64 = 1 << 62;

/// Which cgroup hierarchy the node mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// cgroup v2: one tree at `root`.
    V2 {
        /// The mount point, `/sys/fs/cgroup`.
        root: PathBuf,
    },
    /// cgroup v1: a tree per controller under `root` (`root/cpuacct`, `root/memory`, ...).
    V1 {
        /// The directory of the controllers' mounts, `/sys/fs/cgroup`.
        root: PathBuf,
    },
}

impl Hierarchy {
    /// The hierarchy under `/sys/fs/cgroup`: v2 when its root lists its controllers
    /// (`cgroup.controllers`), else v1 (a hybrid mount's `unified` tree holds no controllers
    /// and is not used).
    pub fn detect() -> Hierarchy {
        Hierarchy::detect_at(Path::new("/sys/fs/cgroup"))
    }

    /// The hierarchy mounted at `root`.
    pub fn detect_at(root: &Path) -> Hierarchy {
        let root = root.to_path_buf();
        if root.join("cgroup.controllers").exists() {
            Hierarchy::V2 { root }
        } else {
            Hierarchy::V1 { root }
        }
    }

    /// The directory of cgroup `path` (`/kubepods/pod<uid>/<id>`) for `controller` (`cpuacct`,
    /// `memory`, `pids`; one directory for all of them on v2).
    pub fn dir(&self, controller: &str, path: &str) -> PathBuf {
        let relative = path.trim_start_matches('/');
        match self {
            Hierarchy::V2 { root } => root.join(relative),
            Hierarchy::V1 { root } => root.join(controller).join(relative),
        }
    }

    /// Whether cgroup `path` exists.
    pub fn exists(&self, path: &str) -> bool {
        self.dir("memory", path).is_dir()
    }

    /// The processes in cgroup `path` (its `cgroup.procs`, not its children's).
    pub fn procs(&self, path: &str) -> Vec<u32> {
        std::fs::read_to_string(self.dir("cpuacct", path).join("cgroup.procs"))
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// The processes in cgroup `path` and every cgroup under it.
    pub fn count_procs(&self, path: &str) -> Option<u64> {
        let root = self.dir("cpuacct", path);
        if !root.is_dir() {
            return None;
        }
        let mut count = 0_u64;
        let mut pending = vec![root];
        while let Some(dir) = pending.pop() {
            if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                count += text.lines().filter(|l| !l.trim().is_empty()).count() as u64;
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    pending.push(entry.path());
                }
            }
        }
        Some(count)
    }

    /// The counters of cgroup `path`; `None` when the cgroup does not exist (any more).
    pub fn read(&self, path: &str) -> Option<CgroupStats> {
        match self {
            Hierarchy::V2 { .. } => {
                let dir = self.dir("", path);
                let cpu = read(&dir.join("cpu.stat")).map(|t| parse_v2_cpu_stat(&t));
                let current = read(&dir.join("memory.current")).and_then(|t| parse_u64(&t));
                let stat = read(&dir.join("memory.stat")).map(|t| flat_keyed(&t));
                if cpu.is_none() && current.is_none() {
                    return None;
                }
                let limit = read(&dir.join("memory.max")).and_then(|t| parse_limit(&t));
                let pids = read(&dir.join("pids.current")).and_then(|t| parse_u64(&t));
                Some(v2_stats(cpu, current, stat.as_deref(), limit, pids))
            }
            Hierarchy::V1 { .. } => {
                let cpu_dir = self.dir("cpuacct", path);
                let memory_dir = self.dir("memory", path);
                let usage = read(&cpu_dir.join("cpuacct.usage")).and_then(|t| parse_u64(&t));
                let cpu_stat = read(&cpu_dir.join("cpuacct.stat")).map(|t| flat_keyed(&t));
                let memory =
                    read(&memory_dir.join("memory.usage_in_bytes")).and_then(|t| parse_u64(&t));
                if usage.is_none() && memory.is_none() {
                    return None;
                }
                let stat = read(&memory_dir.join("memory.stat")).map(|t| flat_keyed(&t));
                let limit = read(&memory_dir.join("memory.limit_in_bytes"))
                    .and_then(|t| parse_u64(&t))
                    .filter(|l| *l < V1_UNLIMITED);
                let pids =
                    read(&self.dir("pids", path).join("pids.current")).and_then(|t| parse_u64(&t));
                Some(v1_stats(
                    usage,
                    cpu_stat.as_deref(),
                    memory,
                    stat.as_deref(),
                    limit,
                    pids,
                ))
            }
        }
    }
}

/// A cgroup's counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupStats {
    /// CPU time used, in nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    /// Of it, in user mode.
    pub cpu_user_ns: Option<u64>,
    /// Of it, in kernel mode.
    pub cpu_system_ns: Option<u64>,
    /// Memory charged to the cgroup, page cache included.
    pub memory_usage: Option<u64>,
    /// The usage less the inactive file cache.
    pub working_set: Option<u64>,
    /// Anonymous memory (and swap cache).
    pub rss: Option<u64>,
    /// Page cache.
    pub cache: Option<u64>,
    /// Minor page faults.
    pub page_faults: Option<u64>,
    /// Major page faults.
    pub major_page_faults: Option<u64>,
    /// The memory limit, when there is one.
    pub memory_limit: Option<u64>,
    /// Tasks in the cgroup and its children (`pids.current`).
    pub processes: Option<u64>,
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// A limit file's value: `max` is none.
fn parse_limit(text: &str) -> Option<u64> {
    match text.trim() {
        "max" => None,
        value => value.parse().ok(),
    }
}

/// A flat keyed file (`key value` per line: `memory.stat`, `cpu.stat`, `cpuacct.stat`).
pub fn flat_keyed(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let key = fields.next()?;
            let value = fields.next()?.parse().ok()?;
            Some((key.to_owned(), value))
        })
        .collect()
}

fn get(stat: Option<&[(String, u64)]>, key: &str) -> Option<u64> {
    stat?.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// cgroup v2's `cpu.stat`: usage, user and system time in nanoseconds.
fn parse_v2_cpu_stat(text: &str) -> (Option<u64>, Option<u64>, Option<u64>) {
    let stat = flat_keyed(text);
    let us = |key: &str| get(Some(&stat), key).map(|v| v.saturating_mul(1000));
    (us("usage_usec"), us("user_usec"), us("system_usec"))
}

fn working_set(usage: Option<u64>, inactive_file: Option<u64>) -> Option<u64> {
    usage.map(|usage| usage.saturating_sub(inactive_file.unwrap_or(0)))
}

fn v2_stats(
    cpu: Option<(Option<u64>, Option<u64>, Option<u64>)>,
    current: Option<u64>,
    stat: Option<&[(String, u64)]>,
    limit: Option<u64>,
    processes: Option<u64>,
) -> CgroupStats {
    let (cpu_usage_ns, cpu_user_ns, cpu_system_ns) = cpu.unwrap_or_default();
    CgroupStats {
        cpu_usage_ns,
        cpu_user_ns,
        cpu_system_ns,
        memory_usage: current,
        working_set: working_set(current, get(stat, "inactive_file")),
        rss: get(stat, "anon"),
        cache: get(stat, "file"),
        page_faults: get(stat, "pgfault"),
        major_page_faults: get(stat, "pgmajfault"),
        memory_limit: limit,
        processes,
    }
}

fn v1_stats(
    usage: Option<u64>,
    cpu_stat: Option<&[(String, u64)]>,
    memory: Option<u64>,
    stat: Option<&[(String, u64)]>,
    limit: Option<u64>,
    processes: Option<u64>,
) -> CgroupStats {
    let ticks = |key: &str| get(cpu_stat, key).map(|t| t.saturating_mul(1_000_000_000 / USER_HZ));
    CgroupStats {
        cpu_usage_ns: usage,
        cpu_user_ns: ticks("user"),
        cpu_system_ns: ticks("system"),
        memory_usage: memory,
        working_set: working_set(memory, get(stat, "total_inactive_file")),
        rss: get(stat, "total_rss"),
        cache: get(stat, "total_cache"),
        page_faults: get(stat, "total_pgfault"),
        major_page_faults: get(stat, "total_pgmajfault"),
        memory_limit: limit,
        processes,
    }
}

/// The cgroup of the pod with `uid`, as the kubelet lays them out with the cgroupfs driver
/// ([`crate::spec::cgroup_parent`]): under `/kubepods` for Guaranteed pods, under
/// `/kubepods/burstable` or `/kubepods/besteffort` for the others; `None` when none exists.
pub fn pod_cgroup(hierarchy: &Hierarchy, uid: &str) -> Option<String> {
    [
        format!("/kubepods/pod{uid}"),
        format!("/kubepods/burstable/pod{uid}"),
        format!("/kubepods/besteffort/pod{uid}"),
    ]
    .into_iter()
    .find(|path| hierarchy.exists(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    const V2_MEMORY_STAT: &str = "anon 1048576\nfile 4194304\nkernel 8192\n\
        inactive_anon 0\nactive_anon 1048576\ninactive_file 3145728\nactive_file 1048576\n\
        pgfault 1234\npgmajfault 5\n";

    #[test]
    fn cgroup_v2_files_are_read_as_cadvisor_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        let pod = dir.path().join("kubepods/burstable/podu1");
        std::fs::create_dir_all(&pod).unwrap();
        std::fs::write(
            pod.join("cpu.stat"),
            "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\nnr_periods 0\n",
        )
        .unwrap();
        std::fs::write(pod.join("memory.current"), "5242880\n").unwrap();
        std::fs::write(pod.join("memory.stat"), V2_MEMORY_STAT).unwrap();
        std::fs::write(pod.join("memory.max"), "max\n").unwrap();
        std::fs::write(pod.join("pids.current"), "3\n").unwrap();
        let hierarchy = Hierarchy::detect_at(dir.path());
        assert!(matches!(hierarchy, Hierarchy::V2 { .. }));
        assert_eq!(
            pod_cgroup(&hierarchy, "u1").as_deref(),
            Some("/kubepods/burstable/podu1")
        );
        assert_eq!(pod_cgroup(&hierarchy, "u2"), None);
        let stats = hierarchy.read("/kubepods/burstable/podu1").unwrap();
        assert_eq!(
            stats,
            CgroupStats {
                cpu_usage_ns: Some(2_500_000),
                cpu_user_ns: Some(2_000_000),
                cpu_system_ns: Some(500_000),
                memory_usage: Some(5_242_880),
                working_set: Some(5_242_880 - 3_145_728),
                rss: Some(1_048_576),
                cache: Some(4_194_304),
                page_faults: Some(1234),
                major_page_faults: Some(5),
                memory_limit: None,
                processes: Some(3),
            }
        );
        std::fs::write(pod.join("memory.max"), "1073741824\n").unwrap();
        assert_eq!(
            hierarchy
                .read("/kubepods/burstable/podu1")
                .unwrap()
                .memory_limit,
            Some(1 << 30)
        );
        assert_eq!(hierarchy.read("/kubepods/gone"), None);
    }

    #[test]
    fn cgroup_v1_files_are_read_as_cadvisor_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = "/kubepods/podu1/c1";
        for controller in ["cpuacct", "memory", "pids"] {
            std::fs::create_dir_all(dir.path().join(controller).join(&path[1..])).unwrap();
        }
        let hierarchy = Hierarchy::detect_at(dir.path());
        assert!(matches!(hierarchy, Hierarchy::V1 { .. }));
        std::fs::write(
            hierarchy.dir("cpuacct", path).join("cpuacct.usage"),
            "987654321\n",
        )
        .unwrap();
        std::fs::write(
            hierarchy.dir("cpuacct", path).join("cpuacct.stat"),
            "user 70\nsystem 20\n",
        )
        .unwrap();
        std::fs::write(
            hierarchy.dir("cpuacct", path).join("cgroup.procs"),
            "41\n42\n",
        )
        .unwrap();
        let memory = hierarchy.dir("memory", path);
        std::fs::write(memory.join("memory.usage_in_bytes"), "8388608\n").unwrap();
        std::fs::write(
            memory.join("memory.stat"),
            "cache 100\nrss 200\ntotal_cache 4194304\ntotal_rss 2097152\n\
             total_pgfault 77\ntotal_pgmajfault 1\ntotal_inactive_file 1048576\n",
        )
        .unwrap();
        std::fs::write(
            memory.join("memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        std::fs::write(hierarchy.dir("pids", path).join("pids.current"), "2\n").unwrap();
        let stats = hierarchy.read(path).unwrap();
        assert_eq!(stats.cpu_usage_ns, Some(987_654_321));
        assert_eq!(stats.cpu_user_ns, Some(700_000_000));
        assert_eq!(stats.cpu_system_ns, Some(200_000_000));
        assert_eq!(stats.memory_usage, Some(8_388_608));
        assert_eq!(stats.working_set, Some(8_388_608 - 1_048_576));
        assert_eq!(stats.rss, Some(2_097_152));
        assert_eq!(stats.cache, Some(4_194_304));
        assert_eq!(
            (stats.page_faults, stats.major_page_faults),
            (Some(77), Some(1))
        );
        assert_eq!(
            stats.memory_limit, None,
            "the v1 'unlimited' value is no limit"
        );
        assert_eq!(stats.processes, Some(2));
        assert_eq!(hierarchy.procs(path), [41, 42]);
        std::fs::write(
            hierarchy
                .dir("cpuacct", "/kubepods/podu1")
                .join("cgroup.procs"),
            "7\n",
        )
        .unwrap();
        assert_eq!(hierarchy.count_procs("/kubepods/podu1"), Some(3));
        assert_eq!(hierarchy.count_procs("/kubepods/none"), None);
        assert_eq!(
            pod_cgroup(&hierarchy, "u1").as_deref(),
            Some("/kubepods/podu1")
        );
        std::fs::write(memory.join("memory.limit_in_bytes"), "134217728\n").unwrap();
        assert_eq!(hierarchy.read(path).unwrap().memory_limit, Some(128 << 20));
    }

    #[test]
    fn garbage_is_not_a_figure() {
        assert_eq!(parse_u64("x\n"), None);
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(
            flat_keyed("a 1\nb\nc x\n d 4 \n"),
            [("a".to_owned(), 1), ("d".to_owned(), 4)]
        );
        // The inactive cache never makes the working set negative.
        assert_eq!(working_set(Some(10), Some(20)), Some(0));
        assert_eq!(working_set(None, Some(20)), None);
    }
}
