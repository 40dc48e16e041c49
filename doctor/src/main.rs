//! A tool over the plugin's layers, the host check `nccl-net-doctor`: will the Ferro NCCL network
//! plugin work on this host, and why (not)?
//!
//! A thin wrapper: collection, verdicts and rendering live in this crate's library.
//! Exit status: 0 when at least one device port is usable and no node or pod check failed, 1 when
//! no port is usable, 2 on usage errors, 3 when a port is usable but a node or pod check failed.

use ferro_doctor::{self as doctor, Command, Output};
use std::io::Write;
use std::process::ExitCode;

/// Writes to stdout, ignoring a closed pipe (`nccl-net-doctor | head` must not panic).
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Prints a usage error (clap's, or one found after parsing) and gives exit status 2.
fn usage_error(e: &clap::Error) -> ExitCode {
    eprint!("{e}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let opts = match doctor::parse_args(std::env::args_os().skip(1)) {
        Ok(Command::Help) => {
            print(&doctor::help());
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            print(&format!(
                "nccl-net-doctor {} ({} NCCL network plugin)\n",
                nccl_net_ferro::VERSION,
                nccl_net_ferro::PLUGIN_NAME.to_string_lossy()
            ));
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run(opts)) => opts,
        Err(e) => return usage_error(&e),
    };
    // Name the option the user gave: --root when it set the tree, else --sysfs-root.
    if let Some(root) = opts.root.as_ref().filter(|r| !r.is_dir()) {
        return usage_error(&doctor::usage_error(format!(
            "--root {}: not a directory",
            root.display()
        )));
    }
    if !opts.sysfs_root.is_dir() {
        let from_root = opts
            .root
            .as_ref()
            .is_some_and(|r| opts.sysfs_root == r.join("sys"));
        let option = if from_root {
            "--root (its sys directory)"
        } else {
            "--sysfs-root"
        };
        return usage_error(&doctor::usage_error(format!(
            "{option} {}: not a directory",
            opts.sysfs_root.display()
        )));
    }
    let mut report = match &opts.root {
        Some(root) => doctor::collect_at(&doctor::Roots::under(root)),
        None => doctor::collect(&opts.sysfs_root),
    };
    report.gdr_policy = opts.gdr_policy;
    print(&match opts.output {
        Output::Text => doctor::render_text(&report),
        Output::Json => doctor::render_json(&report),
        Output::Nfd => doctor::render_nfd(&report),
    });
    ExitCode::from(doctor::exit_code(&report))
}
