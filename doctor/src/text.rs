//! The text report (the screen).

use crate::node::limits::unlimited_or_bytes;
use crate::*;
use ferro_verbs::loader::LIB_ENV;
use ferro_verbs::sysfs::{GidEntry, format_guid};
use nccl_net_ferro::config::Standing;
use std::fmt::Write as _;

/// The one-screen text report.
pub fn render_text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "nccl-net-doctor: {} {} (NCCL network plugin over ibverbs)",
        r.plugin_name, r.plugin_version
    );

    o.push_str("\nConfiguration\n");
    wrap(&mut o, "  ", "    ", &r.config.summary());
    for w in &r.config_warnings {
        wrap(&mut o, "  warning: ", "    ", w);
    }
    render_nccl_variables(&mut o, &r.nccl_variables);

    o.push_str("\nlibibverbs\n");
    render_library(&mut o, &r.library);

    o.push_str("\nDevices\n");
    if let Some(text) = no_devices_explanation(r) {
        wrap(&mut o, "  ", "  ", &text);
    } else if r.library.outcome.is_err() && r.devices.is_empty() {
        o.push_str("  not enumerated (libibverbs is not loaded)\n");
    }
    for d in &r.devices {
        render_device(&mut o, d);
    }
    for e in &r.enumeration_errors {
        wrap(&mut o, "  warning: ", "    ", e);
    }

    o.push_str("\nHost\n");
    render_host(&mut o, r);

    if r.node.is_some() {
        o.push_str("\nGPUDirect RDMA, node and pod\n");
        node::render_node_text(&mut o, &report_checks(r));
    }

    o.push_str("\nVerdict\n");
    for v in verdict_lines(r) {
        wrap(&mut o, "  ", "      ", &v.line);
    }
    wrap(&mut o, "  => ", "     ", &overall(r).summary);
    if let Some(s) = node_summary(r) {
        wrap(&mut o, "  => ", "     ", &s);
    }
    o
}

/// NCCL 2.30's variables: one line each with the value here, NCCL's default and how the plugin
/// stands to it (with how, for the variables that differ, and why, for the ones that do not apply
/// and are set).
fn render_nccl_variables(o: &mut String, rows: &[nccl_net_ferro::config::VariableRow]) {
    if rows.is_empty() {
        return;
    }
    o.push_str("  NCCL 2.30 variables (value here; NCCL's default; this plugin):\n");
    for row in rows {
        let line = format!(
            "{}={} (NCCL: {}; {})",
            row.name,
            row.value,
            row.nccl_default,
            row.standing.word()
        );
        let set = row.value != "unset";
        let note = row.standing.note();
        let differs = matches!(row.standing, Standing::Differs(_));
        if !note.is_empty() && (differs || set) {
            wrap(o, "    ", "        ", &format!("{line}: {note}"));
        } else {
            wrap(o, "    ", "        ", &line);
        }
    }
}

pub(crate) fn render_library(o: &mut String, lib: &Library) {
    let ov = match &lib.override_value {
        Some(v) => format!("{LIB_ENV}={v:?}"),
        None => format!("{LIB_ENV} unset"),
    };
    match &lib.outcome {
        Ok(caps) => {
            let _ = writeln!(o, "  loaded {} ({ov})", lib.name);
            let iova2 = if caps.reg_mr_iova2 {
                "yes"
            } else {
                "no (rdma-core older than 22: no relaxed ordering)"
            };
            let dmabuf = if caps.reg_dmabuf_mr {
                "yes"
            } else {
                "no (rdma-core older than 34: no DMA-BUF registration)"
            };
            let _ = writeln!(
                o,
                "  ibv_reg_mr_iova2: {iova2}; ibv_reg_dmabuf_mr: {dmabuf}"
            );
            let speed = if caps.query_port_speed {
                "yes"
            } else {
                "no (speeds from ibv_query_port's speed and width codes)"
            };
            let _ = writeln!(o, "  ibv_query_port_speed: {speed}");
        }
        Err(e) => {
            wrap(o, "  NOT LOADED: ", "    ", &e.message);
            if lib.override_value.is_none() {
                let _ = writeln!(o, "  ({LIB_ENV} can name a libibverbs at another path)");
            }
            if let Some(h) = &e.hint {
                wrap(o, "  hint: ", "    ", h);
            }
        }
    }
}

pub(crate) fn render_device(o: &mut String, d: &Device) {
    let fw = d.fw_ver.as_deref().filter(|s| !s.is_empty()).unwrap_or("?");
    let qps = d.max_qp.map_or(String::new(), |q| format!(", max QPs {q}"));
    let pci = d
        .pci_path
        .as_ref()
        .map_or("virtual (no PCI device)".to_string(), |p| {
            format!("PCI {p}")
        });
    let _ = writeln!(o, "  {}: fw {fw}{qps}, {pci}", d.name);
    let guid = |g: Option<u64>| g.map_or("?".to_string(), format_guid);
    let _ = writeln!(
        o,
        "    node GUID {}, sys image GUID {}",
        guid(d.node_guid),
        guid(d.sys_image_guid)
    );
    if let Some(g) = &d.gdr {
        wrap(o, "    GPU memory: ", "      ", g);
    }
    if let Some(e) = &d.error {
        wrap(o, "    error: ", "      ", e);
    }
    for n in &d.notes {
        wrap(o, "    note: ", "      ", n);
    }
    for p in &d.ports {
        render_port(o, p);
    }
}

pub(crate) fn render_port(o: &mut String, p: &Port) {
    let mut line = format!("    port {}: {}, {}", p.num, p.state, p.link_layer);
    match (p.speed_mbps, p.speed_text.is_empty()) {
        (Some(m), false) => {
            let _ = write!(line, ", {m} Mbps ({})", p.speed_text);
        }
        (Some(m), true) => {
            let _ = write!(line, ", {m} Mbps");
        }
        (None, false) => {
            let _ = write!(line, ", {}", p.speed_text);
        }
        (None, true) => line.push_str(", speed unknown"),
    }
    if let Some(mtu) = p.active_mtu {
        let _ = write!(line, ", active MTU {mtu}");
    }
    if let Some(n) = &p.netdev {
        let _ = write!(line, ", netdev {n}");
    }
    if !p.link_layer.is_ethernet() {
        let _ = write!(line, ", LID {}", p.lid);
    }
    o.push_str(&line);
    o.push('\n');
    o.push_str(&gid_table(p));
    match &p.gid {
        Ok(c) => wrap(o, "      GID choice: ", "        ", &c.reason),
        Err(e) if p.link_layer.is_ethernet() => wrap(o, "      GID: ", "        ", e),
        Err(e) => wrap(
            o,
            "      GID: ",
            "        ",
            &format!("{e} (InfiniBand addresses by LID; not fatal)"),
        ),
    }
}

/// The port's non-zero GID entries like `show_gids`, the plugin's choice marked `*`.
pub fn gid_table(p: &Port) -> String {
    let mut o = String::new();
    let rows: Vec<&GidEntry> = p.gids.iter().filter(|g| !g.is_zero()).collect();
    let zeros = p.gids.len() - rows.len();
    if rows.is_empty() {
        if p.gids.is_empty() {
            o.push_str("      GID table: not readable from sysfs\n");
        } else {
            let _ = writeln!(o, "      GID table: only empty entries ({zeros})");
        }
        return o;
    }
    let chosen = p.gid.as_ref().ok().map(|c| c.index);
    let compact: Vec<String> = rows.iter().map(|g| g.to_string()).collect();
    let w = compact
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max("address".len());
    let _ = writeln!(
        o,
        "        {:>5}  {:<39}  {:<w$}  {:<7}  af  netdev",
        "index", "GID", "address", "type"
    );
    for (g, c) in rows.iter().zip(&compact) {
        let mark = if Some(g.index) == chosen { '*' } else { ' ' };
        let _ = writeln!(
            o,
            "      {mark} {:>5}  {}  {c:<w$}  {:<7}  {:<2}  {}",
            g.index,
            g.raw_text(),
            gid_type_name(g.gid_type),
            family_name(g).unwrap_or("-"),
            g.netdev.as_deref().unwrap_or("-")
        );
    }
    if zeros > 0 {
        let _ = writeln!(o, "        ({zeros} empty entries not shown)");
    }
    o
}

pub(crate) fn render_host(o: &mut String, r: &Report) {
    let h = &r.host;
    let l = &h.limits;
    match &l.memlock {
        Ok(m) => {
            let _ = writeln!(
                o,
                "  locked memory (RLIMIT_MEMLOCK): {} (hard limit {})",
                unlimited_or_bytes(m.soft),
                unlimited_or_bytes(m.hard)
            );
        }
        Err(e) => {
            let _ = writeln!(o, "  locked memory (RLIMIT_MEMLOCK): unknown ({e})");
        }
    }
    match &h.iommu {
        Some(m) => wrap(o, "  ", "    ", &m.describe()),
        None => o.push_str("  IOMMU: unknown (cannot read /proc/cmdline)\n"),
    }
    match &l.shm {
        Ok(s) => {
            let free = s
                .available_bytes
                .map_or(String::new(), |f| format!(" ({} free)", format_bytes(f)));
            let _ = writeln!(o, "  /dev/shm: {}{free}", format_bytes(s.size_bytes));
        }
        Err(e) => {
            let _ = writeln!(o, "  /dev/shm: {e}");
        }
    }
    match &h.dev_infiniband {
        Some(entries) if entries.is_empty() => o.push_str("  /dev/infiniband: present, empty\n"),
        Some(entries) => {
            wrap(o, "  /dev/infiniband: ", "    ", &entries.join(" "));
        }
        None => o.push_str("  /dev/infiniband: absent\n"),
    }
    if let Some(f) = dev_infiniband_finding(h.dev_infiniband.is_some(), !r.devices.is_empty()) {
        render_finding(o, &f);
    }
    wrap(o, "  ", "    ", &gpu_description(r));
    let env: Vec<String> = h
        .env
        .pairs()
        .iter()
        .map(|(k, v)| format!("{k}={}", or_unset(*v)))
        .collect();
    wrap(o, "  ", "    ", &env.join("  "));
    for f in shown_env_findings(r) {
        render_finding(o, &f);
    }
}

pub(crate) fn render_finding(o: &mut String, f: &Finding) {
    let first = match f.level {
        Level::Warning => "    warning: ",
        Level::Note => "    note: ",
    };
    wrap(o, first, "      ", &f.text);
}
