//! The command line: options, their values, and usage errors that name the option as typed.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// `--help` text.
pub const HELP: &str = "\
nccl-net-doctor: will the Ferro NCCL network plugin work on this host, and why (not)?

Usage: nccl-net-doctor [--json | --output text|json|nfd] [--gdr-policy required|optional]
                       [--sysfs-root PATH] [--root PATH]

Options:
  --output FORMAT     text (the default: one screen), json (one JSON object, format_version 2;
                      keys: see the doctor module docs) or nfd (a node-feature-discovery
                      feature file: key=value lines under ferro.nccl-net/)
  --json              the same as --output json
  --gdr-policy POLICY required (the default): a node without a GPUDirect RDMA path fails;
                      optional: such a node is fine, reported as host staging by design
  --sysfs-root PATH   read the RDMA sysfs tree under PATH instead of /sys (for fake trees;
                      libibverbs itself always reads the real /sys)
  --root PATH         read PATH/sys, PATH/proc and PATH/dev instead of /sys, /proc and /dev,
                      and look for NCCL and the plugin under PATH (a fake tree, or the host's
                      filesystem mounted into a container)
  -V, --version       print the doctor's version
  -h, --help          print this help

Options that take a value also accept it after `=` (--root=PATH).

The report uses the plugin's own configuration (NCCL_IB_* variables), device discovery and GID
choice, then checks GPUDirect RDMA, the node and the pod (NVIDIA modules, IOMMU, PCIe
topology, SR-IOV, NCCL_SOCKET_IFNAME, /dev/infiniband, memlock, /dev/shm) and NCCL (the
installed libnccl.so.2, the plugin file NCCL_NET_PLUGIN resolves to and the table NCCL would
pick from it, NCCL_NET).
Exit status: 0 when at least one device port is usable and no node or pod check failed; 1 when
no port is usable (including no libibverbs and NCCL_IB_DISABLE=1); 2 on usage errors; 3 when a
port is usable but a node or pod check failed (GPUDirect RDMA or NCCL's networking will not work
as intended).
";

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Output {
    /// The one-screen text report.
    #[default]
    Text,
    /// One JSON object.
    Json,
    /// A node-feature-discovery feature file.
    Nfd,
}

/// Whether a node needs a GPUDirect RDMA path (`--gdr-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GdrPolicy {
    /// No GPUDirect RDMA path is a failure.
    #[default]
    Required,
    /// Host staging is the design: no GPUDirect RDMA path is fine, and said so.
    Optional,
}

impl GdrPolicy {
    pub fn name(self) -> &'static str {
        match self {
            GdrPolicy::Required => "required",
            GdrPolicy::Optional => "optional",
        }
    }
}

/// Parsed options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub output: Output,
    pub gdr_policy: GdrPolicy,
    pub sysfs_root: PathBuf,
    /// `--root`: read `sys`, `proc` and `dev` under it.
    pub root: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            output: Output::Text,
            gdr_policy: GdrPolicy::Required,
            sysfs_root: PathBuf::from("/sys"),
            root: None,
        }
    }
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    Version,
    Run(Options),
}

/// Parses the arguments after the program name; `Err` is a usage error message that names the
/// option as the user typed it.
pub fn parse_args<I: IntoIterator<Item = OsString>>(args: I) -> Result<Command, String> {
    let mut opts = Options::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let bytes = arg.as_bytes();
        // `--name=value`: split at the first `=`, keeping the value's bytes intact.
        let (name, inline): (String, Option<OsString>) = match bytes.iter().position(|&b| b == b'=')
        {
            Some(i) if bytes.starts_with(b"--") => (
                String::from_utf8_lossy(&bytes[..i]).into_owned(),
                Some(OsStr::from_bytes(&bytes[i + 1..]).to_os_string()),
            ),
            _ => (arg.to_string_lossy().into_owned(), None),
        };
        let typed = arg.to_string_lossy().into_owned();
        let mut value = |what: &str| -> Result<OsString, String> {
            match inline.clone().or_else(|| args.next()) {
                Some(v) if !v.is_empty() => Ok(v),
                _ => Err(format!("{name} needs {what}")),
            }
        };
        let flag = |inline: &Option<OsString>| match inline {
            Some(_) => Err(format!("{name} takes no value (got {typed:?})")),
            None => Ok(()),
        };
        match name.as_str() {
            "-h" | "--help" => {
                flag(&inline)?;
                return Ok(Command::Help);
            }
            "-V" | "--version" => {
                flag(&inline)?;
                return Ok(Command::Version);
            }
            "--json" => {
                flag(&inline)?;
                opts.output = Output::Json;
            }
            "--output" => {
                let v = value("a FORMAT (text, json or nfd)")?;
                opts.output = match v.to_string_lossy().as_ref() {
                    "text" => Output::Text,
                    "json" => Output::Json,
                    "nfd" => Output::Nfd,
                    other => {
                        return Err(format!(
                            "{name}: unknown format {other:?} (text, json or nfd)"
                        ));
                    }
                };
            }
            "--gdr-policy" => {
                let v = value("a POLICY (required or optional)")?;
                opts.gdr_policy = match v.to_string_lossy().as_ref() {
                    "required" => GdrPolicy::Required,
                    "optional" => GdrPolicy::Optional,
                    other => {
                        return Err(format!(
                            "{name}: unknown policy {other:?} (required or optional)"
                        ));
                    }
                };
            }
            "--sysfs-root" => opts.sysfs_root = PathBuf::from(value("a PATH")?),
            "--root" => {
                let p = PathBuf::from(value("a PATH")?);
                opts.sysfs_root = p.join("sys");
                opts.root = Some(p);
            }
            _ => return Err(format!("unknown argument {typed:?}")),
        }
    }
    Ok(Command::Run(opts))
}
