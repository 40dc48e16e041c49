//! Locked memory and `/dev/shm`: the one reader of these facts and the one judgement of them.
//!
//! [`read_limits`] reads them under the roots like the other node readers (`<proc>/self/limits`,
//! `<proc>/self/status`, `<proc>/self/mounts`, `<proc>/meminfo`), so a fake tree drives it; only
//! the free space of `/dev/shm`, which no file states, comes from `statvfs` on `<dev>/shm`, and is
//! shown, never judged. The report keeps the facts with the host facts (the "Host" section and the
//! `host` object of the JSON report show them); [`memlock_check`] and [`shm_check`] judge them,
//! as the `pod.memlock` and `pod.shm` checks among the node and pod checks.

use super::*;
use crate::format_bytes;
use std::fmt;

#[cfg(test)]
mod tests;

/// A finite `RLIMIT_MEMLOCK` below this draws a warning: registering large buffers will fail.
pub const MEMLOCK_WARN_BELOW: u64 = 64 << 20;
/// A `/dev/shm` smaller than this draws a warning (Docker's default is 64 MiB).
pub const SHM_WARN_BELOW: u64 = 1 << 30;
/// Bit of `CAP_IPC_LOCK` in the capability masks of `/proc/self/status`.
const CAP_IPC_LOCK_BIT: u32 = 14;

/// Locked memory and `/dev/shm` as this process sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `Max locked memory` of `<proc>/self/limits`, or why it is unknown.
    pub memlock: Result<Memlock, String>,
    /// Whether `CAP_IPC_LOCK` is effective (`CapEff` of `<proc>/self/status`; `None`: unknown).
    pub cap_ipc_lock: Option<bool>,
    /// The `/dev/shm` mount, or why there is no size to judge.
    pub shm: Result<Shm, ShmProblem>,
}

/// The locked-memory limit; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memlock {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// Size of `/dev/shm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shm {
    /// From the mount's `size=` option, else tmpfs's default (half of `MemTotal`).
    pub size_bytes: u64,
    /// Free space (`statvfs` on `<dev>/shm`); `None` when it cannot be measured.
    pub available_bytes: Option<u64>,
}

/// Why `/dev/shm` has no size to judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShmProblem {
    /// The mount table has no `/dev/shm`.
    NotMounted,
    /// The mount table or the mount's size could not be read.
    Unknown(String),
}

impl fmt::Display for ShmProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShmProblem::NotMounted => f.write_str("not mounted (no /dev/shm in /proc/self/mounts)"),
            ShmProblem::Unknown(why) => f.write_str(why),
        }
    }
}

/// Reads the limits under `roots`.
pub fn read_limits(roots: &Roots) -> Limits {
    let proc = &roots.proc;
    Limits {
        memlock: read_memlock(&proc.join("self/limits")),
        cap_ipc_lock: pci::read(&proc.join("self/status"))
            .as_deref()
            .and_then(cap_ipc_lock_from_status),
        shm: read_shm(roots),
    }
}

fn read_memlock(path: &Path) -> Result<Memlock, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    memlock_from_limits(&text)
        .ok_or_else(|| format!("no \"Max locked memory\" limits in {}", path.display()))
}

fn read_shm(roots: &Roots) -> Result<Shm, ShmProblem> {
    let path = roots.proc.join("self/mounts");
    let mounts = std::fs::read_to_string(&path)
        .map_err(|e| ShmProblem::Unknown(format!("cannot read {}: {e}", path.display())))?;
    let meminfo = pci::read(&roots.proc.join("meminfo")).unwrap_or_default();
    Ok(Shm {
        size_bytes: shm_from_mounts(&mounts, &meminfo)?,
        available_bytes: statvfs_available(&roots.dev.join("shm")),
    })
}

/// The `Max locked memory` limits of `/proc/self/limits` text (`None`: no such line, or a value
/// that is neither a number nor `unlimited`).
pub fn memlock_from_limits(text: &str) -> Option<Memlock> {
    let rest = text
        .lines()
        .find_map(|l| l.strip_prefix("Max locked memory"))?;
    let limit = |v: &str| match v {
        "unlimited" => Some(None),
        n => n.parse().ok().map(Some),
    };
    let mut values = rest.split_whitespace();
    Some(Memlock {
        soft: limit(values.next()?)?,
        hard: limit(values.next()?)?,
    })
}

/// The size of the `/dev/shm` mount (the last one wins): its `size=` option (`k`, `m`, `g`
/// suffixes), else tmpfs's default of half of `MemTotal`.
///
/// # Errors
/// [`ShmProblem::NotMounted`] when `mounts` has no `/dev/shm`, [`ShmProblem::Unknown`] when its
/// size cannot be worked out.
pub fn shm_from_mounts(mounts: &str, meminfo: &str) -> Result<u64, ShmProblem> {
    let opts = mounts
        .lines()
        .rev()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && f[1] == "/dev/shm").then(|| f[3].to_string())
        })
        .ok_or(ShmProblem::NotMounted)?;
    let unknown = |what: String| ShmProblem::Unknown(format!("size of /dev/shm unknown: {what}"));
    if let Some(size) = opts.split(',').find_map(|o| o.strip_prefix("size=")) {
        let (num, mult) = match size.char_indices().last() {
            Some((i, 'k' | 'K')) => (&size[..i], 1u64 << 10),
            Some((i, 'm' | 'M')) => (&size[..i], 1 << 20),
            Some((i, 'g' | 'G')) => (&size[..i], 1 << 30),
            _ => (size, 1),
        };
        return num
            .parse::<u64>()
            .map(|n| n.saturating_mul(mult))
            .map_err(|_| unknown(format!("cannot parse size={size}")));
    }
    let total_kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| unknown("no size= option and no MemTotal in /proc/meminfo".to_string()))?;
    Ok(total_kb * 1024 / 2)
}

/// Whether the capability masks in `/proc/self/status` text have `CAP_IPC_LOCK` effective.
pub fn cap_ipc_lock_from_status(status: &str) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let mask = u64::from_str_radix(hex, 16).ok()?;
    Some(mask & (1 << CAP_IPC_LOCK_BIT) != 0)
}

/// Free bytes of the file system at `path`, when `statvfs` can measure it.
// The statvfs fields are u64 on 64-bit targets but u32 on some 32-bit ones.
#[allow(clippy::useless_conversion)]
fn statvfs_available(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = core::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is NUL-terminated; `st` is writable storage for one statvfs struct.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled the struct.
    let st = unsafe { st.assume_init() };
    Some(u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize)))
}

/// The `pod.memlock` check: can RDMA registrations pin the host memory NCCL registers?
///
/// `CAP_IPC_LOCK` or an unlimited limit is ok; a limit below [`MEMLOCK_WARN_BELOW`] without the
/// capability is a warning (registrations fail with `ENOMEM`); with the capability it is worth
/// knowing (a user namespace takes the capability's effect away), as are a larger finite limit
/// without the capability and an unknown limit.
pub fn memlock_check(l: &Limits) -> Check {
    let cap = match l.cap_ipc_lock {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    };
    let limit = match &l.memlock {
        Ok(m) => format!(
            "{} (hard limit {})",
            unlimited_or_bytes(m.soft),
            unlimited_or_bytes(m.hard)
        ),
        Err(e) => format!("unknown ({e})"),
    };
    let evidence = format!("CapEff CAP_IPC_LOCK: {cap}; Max locked memory: {limit}");
    let not_effective = if l.cap_ipc_lock == Some(false) {
        "CAP_IPC_LOCK is not effective"
    } else {
        "CAP_IPC_LOCK is not known to be effective"
    };
    let fix = "run with `ulimit -l unlimited` (Docker: `--ulimit memlock=-1`), or add IPC_LOCK to \
               the container's securityContext.capabilities.add";
    let soft = l.memlock.as_ref().ok().map(|m| m.soft);
    let c = match (l.cap_ipc_lock, soft) {
        (Some(true), Some(Some(n))) if n < MEMLOCK_WARN_BELOW => Check::new(
            "pod.memlock",
            "node",
            Status::Info,
            format!(
                "RDMA registrations can pin memory: CAP_IPC_LOCK is effective, so the kernel does not \
                 apply the {} locked-memory limit to them (unless this runs in a user namespace); \
                 `ulimit -l unlimited` is still the safe setting",
                format_bytes(n)
            ),
        ),
        (Some(true), _) => Check::new(
            "pod.memlock",
            "node",
            Status::Ok,
            "RDMA registrations can pin memory: CAP_IPC_LOCK is effective",
        ),
        (_, Some(None)) => Check::new(
            "pod.memlock",
            "node",
            Status::Ok,
            "RDMA registrations can pin memory: memlock is unlimited",
        ),
        (_, Some(Some(n))) if n < MEMLOCK_WARN_BELOW => Check::new(
            "pod.memlock",
            "node",
            Status::Warning,
            format!(
                "locked memory is limited to {} (below {}) and {not_effective}: registering NCCL's \
                 buffers fails once they exceed it (ibv_reg_mr: ENOMEM)",
                format_bytes(n),
                format_bytes(MEMLOCK_WARN_BELOW)
            ),
        )
        .fix(fix),
        (_, Some(Some(n))) => Check::new(
            "pod.memlock",
            "node",
            Status::Info,
            format!(
                "locked memory is limited to {} and {not_effective}: enough for NCCL's own buffers, \
                 but registering more host memory than that fails (ibv_reg_mr: ENOMEM)",
                format_bytes(n)
            ),
        )
        .fix(fix),
        (None, None) => Check::new(
            "pod.memlock",
            "node",
            Status::Info,
            "locked-memory limit and capabilities unknown",
        ),
        (Some(false), None) => Check::new(
            "pod.memlock",
            "node",
            Status::Info,
            "locked-memory limit unknown and CAP_IPC_LOCK is not effective",
        ),
    };
    c.evidence(evidence)
}

/// The `pod.shm` check: is `/dev/shm` there, and at least [`SHM_WARN_BELOW`]?
pub fn shm_check(l: &Limits) -> Check {
    match &l.shm {
        Err(ShmProblem::NotMounted) => Check::new(
            "pod.shm",
            "node",
            Status::Warning,
            "/dev/shm is not mounted: NCCL's shared-memory transport between local ranks fails",
        )
        .fix("mount an emptyDir with medium: Memory at /dev/shm (Docker: `--shm-size=8g` or `--ipc=host`)")
        .evidence("/proc/self/mounts has no /dev/shm"),
        Err(ShmProblem::Unknown(why)) => Check::new(
            "pod.shm",
            "node",
            Status::Info,
            format!("/dev/shm: {why}"),
        ),
        Ok(s) if s.size_bytes < SHM_WARN_BELOW => Check::new(
            "pod.shm",
            "node",
            Status::Warning,
            format!(
                "/dev/shm is {} (below {}): NCCL allocates its intra-node buffers there and fails with \
                 \"unable to allocate shared memory\" (the container default is 64 MiB)",
                format_bytes(s.size_bytes),
                format_bytes(SHM_WARN_BELOW)
            ),
        )
        .fix(
            "mount an emptyDir with medium: Memory (and a sizeLimit of several GiB) at /dev/shm \
             (Docker: `--shm-size=8g` or `--ipc=host`)",
        )
        .evidence(format!(
            "/proc/self/mounts: /dev/shm size {}",
            format_bytes(s.size_bytes)
        )),
        Ok(s) => Check::new(
            "pod.shm",
            "node",
            Status::Ok,
            format!("/dev/shm is {}", format_bytes(s.size_bytes)),
        )
        .evidence(format!(
            "/proc/self/mounts: /dev/shm size {}",
            format_bytes(s.size_bytes)
        )),
    }
}

/// `unlimited` for `None`, else the size.
pub(crate) fn unlimited_or_bytes(n: Option<u64>) -> String {
    n.map_or("unlimited".to_string(), format_bytes)
}
