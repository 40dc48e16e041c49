//! The command line.

use std::ffi::OsString;
use std::path::PathBuf;

/// `--help` text.
pub const HELP: &str = "\
nccl-net-doctor: will the Ferro NCCL network plugin work on this host, and why (not)?

Usage: nccl-net-doctor [--json] [--sysfs-root PATH] [--root PATH]

Options:
  --json              print the report as one JSON object (format_version 2; keys: see the
                      doctor module docs)
  --sysfs-root PATH   read the RDMA sysfs tree under PATH instead of /sys (for fake trees;
                      libibverbs itself always reads the real /sys)
  --root PATH         read PATH/sys, PATH/proc and PATH/dev instead of /sys, /proc and /dev
                      (a fake tree, or the host's filesystem mounted into a container)
  -h, --help          print this help

The report uses the plugin's own configuration (NCCL_IB_* variables), device discovery and GID
choice, then checks GPUDirect RDMA, the node and the pod (NVIDIA modules, IOMMU, PCIe
topology, SR-IOV, NCCL_SOCKET_IFNAME, /dev/infiniband, memlock, /dev/shm).
Exit status: 0 when at least one device port is usable and no node or pod check failed; 1 when
no port is usable (including no libibverbs and NCCL_IB_DISABLE=1); 2 on usage errors; 3 when a
port is usable but a node or pod check failed (GPUDirect RDMA or NCCL's networking will not work
as intended).
";

/// Parsed options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub json: bool,
    pub sysfs_root: PathBuf,
    /// `--root`: read `sys`, `proc` and `dev` under it.
    pub root: Option<PathBuf>,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    Run(Options),
}

/// Parses the arguments after the program name; `Err` is a usage error message.
pub fn parse_args<I: IntoIterator<Item = OsString>>(args: I) -> Result<Command, String> {
    let mut opts = Options {
        json: false,
        sysfs_root: PathBuf::from("/sys"),
        root: None,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        match text.as_ref() {
            "-h" | "--help" => return Ok(Command::Help),
            "--json" => opts.json = true,
            "--sysfs-root" => match args.next() {
                Some(p) if !p.is_empty() => opts.sysfs_root = PathBuf::from(p),
                _ => return Err("--sysfs-root needs a PATH".to_string()),
            },
            "--root" => match args.next() {
                Some(p) if !p.is_empty() => {
                    opts.sysfs_root = PathBuf::from(&p).join("sys");
                    opts.root = Some(PathBuf::from(p));
                }
                _ => return Err("--root needs a PATH".to_string()),
            },
            other => match other.strip_prefix("--sysfs-root=") {
                Some("") => return Err("--sysfs-root needs a PATH".to_string()),
                Some(_) => {
                    // Keep non-UTF-8 paths intact: cut the prefix from the raw bytes.
                    use std::os::unix::ffi::OsStrExt;
                    let bytes = arg.as_bytes();
                    let path = std::ffi::OsStr::from_bytes(&bytes["--sysfs-root=".len()..]);
                    opts.sysfs_root = PathBuf::from(path);
                }
                None => return Err(format!("unknown argument {other:?}")),
            },
        }
    }
    Ok(Command::Run(opts))
}
