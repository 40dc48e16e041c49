//! What the scale mode reads about its own process, the same way for any plugin: memory from
//! `/proc/self/status` (`VmRSS`, `VmLck`, `VmPin`), open file descriptors from `/proc/self/fd`,
//! and the process's verbs objects as the kernel lists them (`rdma resource show qp|cq|mr`: a
//! count of each, the CQs' entries and the MRs' lengths). A reading that is not available (no
//! `rdma` tool, a kernel without `VmPin`) is `None` and shows as "-".

use std::process::Command;

/// One reading of the process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) rss_kib: Option<u64>,
    pub(crate) lck_kib: Option<u64>,
    pub(crate) pin_kib: Option<u64>,
    pub(crate) fds: Option<u64>,
    pub(crate) verbs: Option<Verbs>,
}

/// The process's verbs objects (`rdma resource show`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Verbs {
    pub(crate) qp: u64,
    pub(crate) cq: u64,
    /// Sum of the CQs' `cqe` (their depths as the provider made them).
    pub(crate) cqe: u64,
    pub(crate) mr: u64,
    /// Sum of the MRs' `mrlen` (bytes registered, so pinned, by this process's MRs).
    pub(crate) mr_bytes: u64,
}

/// Reads everything now; `with_verbs` false skips the `rdma` calls (they list every object of
/// the machine, which costs time at thousands of QPs).
pub(crate) fn snapshot(with_verbs: bool) -> Snapshot {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |k: &str| status_kib(&status, k);
    Snapshot {
        rss_kib: kib("VmRSS"),
        lck_kib: kib("VmLck"),
        pin_kib: kib("VmPin"),
        fds: open_fds(),
        verbs: if with_verbs { verbs(&tasks()) } else { None },
    }
}

/// The value in KiB of `key:` in `/proc/<pid>/status` text.
pub(crate) fn status_kib(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if k.trim() != key {
            return None;
        }
        let mut it = v.split_whitespace();
        let n: u64 = it.next()?.parse().ok()?;
        match it.next() {
            Some("kB") | None => Some(n),
            Some(_) => None,
        }
    })
}

/// Entries of `/proc/self/fd`, less the one the listing itself holds.
fn open_fds() -> Option<u64> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(n.saturating_sub(1))
}

fn rdma(kind: &str) -> Option<String> {
    let out = Command::new("rdma")
        .args(["resource", "show", kind])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The ids of this process's threads (the kernel lists a verbs object under the thread that
/// made it).
fn tasks() -> Vec<u32> {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_else(|_| vec![std::process::id()])
}

/// The verbs objects of the threads `pids`, or `None` without a working `rdma` tool.
fn verbs(pids: &[u32]) -> Option<Verbs> {
    let qp = rdma("qp")?;
    let cq = rdma("cq")?;
    let mr = rdma("mr")?;
    let (qp, _) = pid_lines(&qp, pids, None);
    let (cq, cqe) = pid_lines(&cq, pids, Some("cqe"));
    let (mr, mr_bytes) = pid_lines(&mr, pids, Some("mrlen"));
    Some(Verbs {
        qp,
        cq,
        cqe,
        mr,
        mr_bytes,
    })
}

/// The lines of `rdma resource show` text that belong to one of `pids` (`... pid <n> ...`), and
/// the sum of the number after `field` on them.
pub(crate) fn pid_lines(text: &str, pids: &[u32], field: Option<&str>) -> (u64, u64) {
    let (mut n, mut sum) = (0, 0);
    for l in text.lines() {
        let toks: Vec<&str> = l.split_whitespace().collect();
        let mine = toks
            .windows(2)
            .any(|w| w[0] == "pid" && w[1].parse().is_ok_and(|p: u32| pids.contains(&p)));
        if !mine {
            continue;
        }
        n += 1;
        if let Some(f) = field {
            sum += toks
                .windows(2)
                .find(|w| w[0] == f)
                .and_then(|w| w[1].parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    (n, sum)
}

/// Raises the soft limit of open files to the hard limit (thousands of comms hold one socket
/// each); returns the limit now in force.
pub(crate) fn raise_fd_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer to an rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return None;
    }
    if r.rlim_cur < r.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: r.rlim_max,
            rlim_max: r.rlim_max,
        };
        // SAFETY: a valid pointer to an rlimit within the hard limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            r = raised;
        }
    }
    Some(r.rlim_cur)
}

/// `RLIMIT_MEMLOCK` in KiB (`None`: unlimited or unknown).
pub(crate) fn memlock_kib() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer to an rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(r.rlim_cur / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_values_are_read_in_kib_and_other_keys_are_ignored() {
        let t =
            "Name:\tx\nVmLck:\t     12 kB\nVmPin:\t       0 kB\nVmRSS:\t  4096 kB\nThreads:\t3\n";
        assert_eq!(status_kib(t, "VmRSS"), Some(4096));
        assert_eq!(status_kib(t, "VmLck"), Some(12));
        assert_eq!(status_kib(t, "VmPin"), Some(0));
        assert_eq!(status_kib(t, "VmSwap"), None);
        assert_eq!(status_kib(t, "Threads"), Some(3));
    }

    #[test]
    fn only_the_lines_of_the_pid_count_and_their_field_is_summed() {
        let t = "\
dev rxe0 cqn 1 cqe 255 users 2 poll-ctx UNBOUND_WORKQUEUE pid 41 comm a
dev rxe0 cqn 2 cqe 63 users 1 pid 4 comm b
dev rxe0 cqn 3 cqe 127 users 1 pid 41 comm a
dev rxe0 cqn 4 cqe 127 users 1 comm [ib_core]
";
        assert_eq!(pid_lines(t, &[41], Some("cqe")), (2, 382));
        assert_eq!(pid_lines(t, &[4], None), (1, 0));
        assert_eq!(pid_lines(t, &[4, 41], Some("cqe")), (3, 445));
        assert_eq!(pid_lines(t, &[7], Some("cqe")), (0, 0));
    }

    #[test]
    fn this_process_has_memory_and_descriptors() {
        let s = snapshot(false);
        assert!(s.rss_kib.is_some_and(|k| k > 0), "{s:?}");
        assert!(s.fds.is_some_and(|n| n >= 1), "{s:?}");
        assert_eq!(s.verbs, None);
    }
}
