//! The command line: options, their values, and usage errors that name the option as typed.
//!
//! Parsed by `clap` (derive): `--opt VALUE` and `--opt=VALUE` both work, a repeated option keeps
//! its last value, and every usage error names the option and the value given.

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

/// What follows the options in `--help`.
const AFTER_HELP: &str = "\
Options that take a value also accept it after `=` (--root=PATH).

The report uses the plugin's own configuration (NCCL_IB_* variables), device discovery and GID
choice, then checks GPUDirect RDMA, the node and the pod (NVIDIA modules, IOMMU, PCIe
topology, SR-IOV, NCCL_SOCKET_IFNAME, /dev/infiniband, memlock, /dev/shm) and NCCL (the
installed libnccl.so.2, the plugin file NCCL_NET_PLUGIN resolves to and the table NCCL would
pick from it, NCCL_NET).
Exit status: 0 when at least one device port is usable and no node or pod check failed; 1 when
no port is usable (including no libibverbs and NCCL_IB_DISABLE=1); 2 on usage errors; 3 when a
port is usable but a node or pod check failed (GPUDirect RDMA or NCCL's networking will not work
as intended).";

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Output {
    /// The one-screen text report.
    #[default]
    Text,
    /// One JSON object (format_version 2; keys: see the doctor module docs).
    Json,
    /// A node-feature-discovery feature file: key=value lines under ferro.nccl-net/.
    Nfd,
}

/// Whether a node needs a GPUDirect RDMA path (`--gdr-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
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

/// The command line as `clap` sees it; [`parse_args`] turns it into [`Options`].
#[derive(Debug, Parser)]
#[command(
    name = "nccl-net-doctor",
    version,
    about = "nccl-net-doctor: will the Ferro NCCL network plugin work on this host, and why (not)?",
    after_help = AFTER_HELP,
    args_override_self = true,
    next_line_help = true
)]
struct Cli {
    /// How the report is printed: text (the default: one screen), json (one JSON object,
    /// format_version 2; keys: see the doctor module docs) or nfd (a node-feature-discovery
    /// feature file: key=value lines under ferro.nccl-net/)
    #[arg(
        verbatim_doc_comment,
        hide_possible_values = true,
        long,
        value_name = "FORMAT",
        value_enum,
        overrides_with = "json"
    )]
    output: Option<Output>,
    /// The same as --output json
    #[arg(long, overrides_with = "output")]
    json: bool,
    /// required (the default): a node without a GPUDirect RDMA path fails;
    /// optional: such a node is fine, reported as host staging by design
    #[arg(
        verbatim_doc_comment,
        hide_possible_values = true,
        hide_default_value = true,
        long,
        value_name = "POLICY",
        value_enum,
        default_value_t
    )]
    gdr_policy: GdrPolicy,
    /// Read the RDMA sysfs tree under PATH instead of /sys (for fake trees; libibverbs itself
    /// always reads the real /sys)
    #[arg(
        verbatim_doc_comment,
        long,
        value_name = "PATH",
        allow_hyphen_values = true
    )]
    sysfs_root: Option<PathBuf>,
    /// Read PATH/sys, PATH/proc and PATH/dev instead of /sys, /proc and /dev, and look for NCCL
    /// and the plugin under PATH (a fake tree, or the host's filesystem mounted into a container)
    #[arg(
        verbatim_doc_comment,
        long,
        value_name = "PATH",
        allow_hyphen_values = true
    )]
    root: Option<PathBuf>,
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

/// The `--help` text.
pub fn help() -> String {
    Cli::command().render_help().to_string()
}

/// Parses the arguments after the program name. `Err` is a usage error that names the option
/// as the user typed it (print it with its `Display`: it ends with a usage line).
pub fn parse_args<I: IntoIterator<Item = OsString>>(args: I) -> Result<Command, clap::Error> {
    let argv = std::iter::once(OsString::from("nccl-net-doctor")).chain(args);
    let matches = match Cli::command().try_get_matches_from(argv) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::DisplayHelp => return Ok(Command::Help),
        Err(e) if e.kind() == ErrorKind::DisplayVersion => return Ok(Command::Version),
        Err(e) => return Err(e),
    };
    let cli = Cli::from_arg_matches(&matches)?;
    let output = match (cli.json, cli.output) {
        (true, _) => Output::Json,
        (false, o) => o.unwrap_or_default(),
    };
    // `--root` sets the sysfs tree too; of `--root` and `--sysfs-root`, the later one decides.
    let root_is_later = matches.index_of("root") > matches.index_of("sysfs_root");
    let sysfs_root = match (&cli.root, cli.sysfs_root) {
        (Some(root), Some(_)) if root_is_later => root.join("sys"),
        (Some(root), None) => root.join("sys"),
        (_, Some(s)) => s,
        (None, None) => PathBuf::from("/sys"),
    };
    Ok(Command::Run(Options {
        output,
        gdr_policy: cli.gdr_policy,
        sysfs_root,
        root: cli.root,
    }))
}

/// A usage error found after parsing (such as a path that is not a directory), in clap's form.
pub fn usage_error(msg: impl std::fmt::Display) -> clap::Error {
    Cli::command().error(ErrorKind::ValueValidation, msg)
}
