//! Facts about the soft-RoCE test-bed guest (rxe0 on `lo`, rxe1 on `dummy1`), read with the
//! system's own tools so the plugin is compared against an independent view.

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// The device every data-path scenario uses (soft-RoCE on the loopback interface).
pub const DEV: &str = "rxe0";
/// The second device (soft-RoCE on `dummy1`, 192.0.2.2/24 and 2001:db8::2/64).
pub const DEV2: &str = "rxe1";

/// Panics unless `/sys/class/infiniband/rxe0` exists: guest tests fail (never skip) elsewhere.
pub fn require_guest() {
    let p = Path::new("/sys/class/infiniband").join(DEV);
    assert!(
        p.exists(),
        "this test needs the soft-RoCE guest: {} is missing (rxe0 on lo and rxe1 on dummy1 are \
         created by testbed/guest/setup.sh). Run it in the test bed: `make test`, or \
         testbed/host/run-in-guest.sh -- <this test binary> --test-threads=1; on a host without \
         soft-RoCE, run only the host tests (--test host_load).",
        p.display()
    );
}

/// Serialises guest tests within one test binary: rxe loses completions when many QPs are busy
/// at once, and the emulated guest has two CPUs. Also checks [`require_guest`].
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    require_guest();
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {cmd} {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What `ibv_devinfo -v -d <dev>` says about a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevInfo {
    /// `sys_image_guid`, as printed (`xxxx:xxxx:xxxx:xxxx`), as a number.
    pub sys_image_guid: u64,
    /// Port numbers listed (`port:\t1`).
    pub ports: Vec<u32>,
}

/// Parses `ibv_devinfo -v` output.
pub fn parse_devinfo(text: &str) -> Result<DevInfo, String> {
    let mut guid = None;
    let mut ports = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("sys_image_guid:") {
            let hex: String = v.trim().chars().filter(|c| *c != ':').collect();
            guid = Some(
                u64::from_str_radix(&hex, 16)
                    .map_err(|e| format!("bad sys_image_guid {v:?}: {e}"))?,
            );
        } else if let Some(v) = t.strip_prefix("port:") {
            ports.push(
                v.trim()
                    .parse::<u32>()
                    .map_err(|e| format!("bad port line {t:?}: {e}"))?,
            );
        }
    }
    Ok(DevInfo {
        sys_image_guid: guid.ok_or("no sys_image_guid line")?,
        ports,
    })
}

/// Runs `ibv_devinfo -v -d <dev>`.
pub fn ibv_devinfo(dev: &str) -> Result<DevInfo, String> {
    let text = run("ibv_devinfo", &["-v", "-d", dev])?;
    parse_devinfo(&text).map_err(|e| format!("ibv_devinfo -v -d {dev}: {e}\n{text}"))
}

/// Counts the lines of `rdma resource show <kind>` text that belong to `pid` (each line carries
/// `... pid <n> comm <name>`; kernel-owned objects carry no pid or pid 0).
pub fn count_pid_lines(text: &str, pid: u32) -> usize {
    let want = pid.to_string();
    text.lines()
        .filter(|l| {
            let toks: Vec<&str> = l.split_whitespace().collect();
            toks.windows(2).any(|w| w[0] == "pid" && w[1] == want)
        })
        .count()
}

/// Verbs objects of one process, from `rdma resource show {qp,cq,mr,pd}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VerbsCounts {
    pub qp: usize,
    pub cq: usize,
    pub mr: usize,
    pub pd: usize,
}

impl VerbsCounts {
    /// Whether no kind grew compared with `base`.
    pub fn within(&self, base: &VerbsCounts) -> bool {
        self.qp <= base.qp && self.cq <= base.cq && self.mr <= base.mr && self.pd <= base.pd
    }
}

/// Counts `pid`'s QPs, CQs, MRs and PDs with `rdma resource show`.
pub fn verbs_counts(pid: u32) -> Result<VerbsCounts, String> {
    let count =
        |kind: &str| run("rdma", &["resource", "show", kind]).map(|t| count_pid_lines(&t, pid));
    Ok(VerbsCounts {
        qp: count("qp")?,
        cq: count("cq")?,
        mr: count("mr")?,
        pd: count("pd")?,
    })
}

/// Open file descriptors of this process (entries of /proc/self/fd, not counting the one used to
/// read the directory).
pub fn open_fds() -> Result<usize, String> {
    let n = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| format!("/proc/self/fd: {e}"))?
        .count();
    Ok(n.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devinfo_guid_and_port_parse() {
        let text = "hca_id:\trxe0\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t0.0.0\n\
                    \tnode_guid:\t\t\t5054:00ff:fe12:3456\n\tsys_image_guid:\t\t\t5054:00ff:fe12:3456\n\
                    \tvendor_id:\t\t\t0xffffff\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n";
        let d = parse_devinfo(text).expect("parse");
        assert_eq!(d.sys_image_guid, 0x5054_00ff_fe12_3456);
        assert_eq!(d.ports, vec![1]);
        assert!(parse_devinfo("hca_id: x\n").is_err());
    }

    #[test]
    fn rdma_resource_lines_are_counted_by_pid() {
        let qp = "link rxe0/1 lqpn 1 type GSI state RTS sq-psn 0 comm [ib_core]\n\
                  link rxe0/1 lqpn 17 pdn 3 rqpn 18 type RC state RTS rq-psn 5 sq-psn 9 path-mig-state MIGRATED pid 4242 comm nccl-harness\n\
                  link rxe0/1 lqpn 18 type RC state RTS sq-psn 0 pid 42420 comm other\n\
                  link rxe0/1 lqpn 19 type RC state INIT sq-psn 0 pid 4242 comm nccl-harness\n";
        assert_eq!(count_pid_lines(qp, 4242), 2);
        let mr = "dev rxe0 mrn 4 rkey 0x1 lkey 0x1 mrlen 4096 pdn 3 pid 4242 comm nccl-harness\n";
        assert_eq!(count_pid_lines(mr, 4242), 1);
        assert_eq!(count_pid_lines(mr, 424), 0);
    }
}
