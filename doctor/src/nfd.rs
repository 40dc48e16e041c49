//! The node-feature-discovery feature file (`--output nfd`).
//!
//! NFD's `local` feature source reads files in `/etc/kubernetes/node-feature-discovery/features.d/`
//! (a hook's standard output works the same way): one `name=value` line per feature, `#` starts a
//! comment. Every name here is under the label domain the project owns, `ferro.nccl-net/`; NFD
//! labels the node with them as they are when that domain is allowed (the master's
//! `-extra-label-ns=ferro.nccl-net`), and values are valid label values (at most 63 characters
//! of letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit).
//!
//! Features, always in this order:
//!
//! - `ferro.nccl-net/verdict`: `ok` (exit status 0, no warning), `warn` (exit status 0 with
//!   warnings), `fail` (exit status 1 or 3: no usable port, or a failed node or pod check).
//! - `ferro.nccl-net/gdr`: `on` when some RDMA device has a GPUDirect RDMA path (DMA-BUF or
//!   nvidia-peermem), else `off` (whatever `--gdr-policy` says about it).
//! - `ferro.nccl-net/gdr-policy`: `required` or `optional`, the policy the verdict used.
//! - `ferro.nccl-net/devices`: how many NCCL network devices the plugin would expose (0 when
//!   it would expose none).
//! - `ferro.nccl-net/exit-code`: the doctor's exit status.
//! - `ferro.nccl-net/plugin-version`: the plugin's version the doctor was built with.
//! - `ferro.nccl-net/nccl-version`: the installed NCCL's version; only when it is known.

use crate::*;
use std::fmt::Write as _;

/// The label domain the features live under.
pub const NFD_DOMAIN: &str = "ferro.nccl-net";

/// The feature lines of `r` (see the module documentation).
pub fn nfd_features(r: &Report) -> Vec<(String, String)> {
    let code = exit_code(r);
    let o = overall(r);
    let verdict = match (code, warnings(r).is_empty()) {
        (0, true) => "ok",
        (0, false) => "warn",
        _ => "fail",
    };
    let gdr = if node::policy::gdr_on(&raw_report_checks(r)) {
        "on"
    } else {
        "off"
    };
    let devices = if o.ok { o.usable_ports } else { 0 };
    let mut out = vec![
        ("verdict", verdict.to_string()),
        ("gdr", gdr.to_string()),
        ("gdr-policy", r.gdr_policy.name().to_string()),
        ("devices", devices.to_string()),
        ("exit-code", code.to_string()),
        ("plugin-version", label_value(&r.plugin_version)),
    ];
    if let Some(v) = r
        .node
        .as_ref()
        .and_then(|f| f.nccl.library.as_ref())
        .and_then(|l| l.version)
    {
        out.push(("nccl-version", v.to_string()));
    }
    out.into_iter()
        .map(|(k, v)| (format!("{NFD_DOMAIN}/{k}"), v))
        .collect()
}

/// The feature file: a comment line, then `name=value` lines.
pub fn render_nfd(r: &Report) -> String {
    let mut o = format!(
        "# nccl-net-doctor {} {}: node features for node-feature-discovery\n",
        r.plugin_name, r.plugin_version
    );
    for (k, v) in nfd_features(r) {
        let _ = writeln!(o, "{k}={v}");
    }
    o
}

/// `v` as a valid label value: other characters become `_`, the ends trimmed to a letter or
/// digit, at most 63 characters.
pub fn label_value(v: &str) -> String {
    let mapped: String = v
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}
