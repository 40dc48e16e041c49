//! A tool over the plugin's layers, the host check `nccl-net-doctor`: will the Ferro NCCL network
//! plugin work on this host, and why (not)?
//!
//! A thin wrapper: collection, verdicts and rendering live in this crate's library.
//! Exit status: 0 when at least one device port is usable and no node or pod check failed, 1 when
//! no port is usable, 2 on usage errors, 3 when a port is usable but a node or pod check failed.

use ferro_doctor::{self as doctor, Command};
use std::io::Write;
use std::process::ExitCode;

/// Writes to stdout, ignoring a closed pipe (`nccl-net-doctor | head` must not panic).
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!(
        "nccl-net-doctor: {msg}\nUsage: nccl-net-doctor [--json] [--sysfs-root PATH] [--root PATH]; --help for more"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let opts = match doctor::parse_args(std::env::args_os().skip(1)) {
        Ok(Command::Help) => {
            print(doctor::HELP);
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run(opts)) => opts,
        Err(msg) => return usage_error(&msg),
    };
    if !opts.sysfs_root.is_dir() {
        return usage_error(&format!(
            "--sysfs-root {}: not a directory",
            opts.sysfs_root.display()
        ));
    }
    let report = match &opts.root {
        Some(root) => doctor::collect_at(&doctor::Roots::under(root)),
        None => doctor::collect(&opts.sysfs_root),
    };
    print(&if opts.json {
        doctor::render_json(&report)
    } else {
        doctor::render_text(&report)
    });
    ExitCode::from(doctor::exit_code(&report))
}
