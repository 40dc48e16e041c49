//! The `--json` report (schema in the crate documentation).

use crate::*;
use ferro_verbs::loader::LIB_ENV;
use ferro_verbs::sysfs::{IommuMode, format_guid};
use serde_json::{Value, json};

/// The report as one JSON object (keys in the module documentation).
pub fn to_json(r: &Report) -> Value {
    let c = &r.config;
    let h = &r.host;
    let lib = &r.library;
    let l = &h.limits;
    // The one judgement of these facts (the `pod.memlock` and `pod.shm` checks): its summary is
    // the warning (status warning) or the note (status info).
    let summary_if = |c: Check, wanted: &[Status]| wanted.contains(&c.status).then_some(c.summary);
    let memlock_judged = node::limits::memlock_check(l);
    let memlock_note = summary_if(memlock_judged.clone(), &[Status::Info]);
    let memlock_warning = summary_if(memlock_judged, &[Status::Warning, Status::Fail]);
    let memlock = match &l.memlock {
        Ok(m) => json!({
            "soft_bytes": m.soft, "hard_bytes": m.hard, "unlimited": m.soft.is_none(),
            "cap_ipc_lock": l.cap_ipc_lock,
            "warning": memlock_warning, "note": memlock_note, "error": null,
        }),
        Err(e) => json!({
            "soft_bytes": null, "hard_bytes": null, "unlimited": false, "cap_ipc_lock": l.cap_ipc_lock,
            "warning": memlock_warning, "note": memlock_note, "error": e,
        }),
    };
    let iommu = match &h.iommu {
        Some(m) => json!({
            "mode": match m {
                IommuMode::NotSet => "not_set",
                IommuMode::Off => "off",
                IommuMode::Passthrough => "passthrough",
                IommuMode::On(_) => "translated",
            },
            "description": m.describe(),
            "gdr_friendly": m.gdr_friendly(),
        }),
        None => {
            json!({"mode": "unknown", "description": "cannot read /proc/cmdline", "gdr_friendly": null})
        }
    };
    let shm_warning = summary_if(node::limits::shm_check(l), &[Status::Warning, Status::Fail]);
    let shm = match &l.shm {
        Ok(s) => json!({
            "size_bytes": s.size_bytes, "available_bytes": s.available_bytes,
            "warning": shm_warning, "error": null,
        }),
        Err(e) => json!({
            "size_bytes": null, "available_bytes": null, "warning": shm_warning,
            "error": e.to_string(),
        }),
    };
    let o = overall(r);
    json!({
        "format_version": 2,
        "plugin": {"name": r.plugin_name, "version": r.plugin_version},
        "config": {
            "summary": c.summary(),
            "warnings": r.config_warnings,
            "nccl_variables": r.nccl_variables.iter().map(|v| json!({
                "name": v.name,
                "value": v.value,
                "nccl_default": v.nccl_default,
                "standing": v.standing.word(),
                "note": v.standing.note(),
            })).collect::<Vec<_>>(),
            "ib_disable": c.disable,
            "gid_index": c.gid_index,
            "addr_family": c.addr_family.to_string(),
            "addr_range": c.addr_range.map(|(ip, p)| format!("{ip}/{p}")),
            "roce_version": c.roce_version,
        },
        "libibverbs": {
            "loaded": lib.outcome.is_ok(),
            "library": lib.name,
            "override_variable": LIB_ENV,
            "override_value": lib.override_value,
            "capabilities": lib.outcome.as_ref().ok().map(|caps| json!({
                "ibv_reg_mr_iova2": caps.reg_mr_iova2,
                "ibv_reg_dmabuf_mr": caps.reg_dmabuf_mr,
                "ibv_query_port_speed": caps.query_port_speed,
            })),
            "error": lib.outcome.as_ref().err().map(|e| e.message.clone()),
            "hint": lib.outcome.as_ref().err().and_then(|e| e.hint.clone()),
        },
        "sysfs_root": r.sysfs_root.display().to_string(),
        "devices": r.devices.iter().map(device_json).collect::<Vec<_>>(),
        "enumeration_errors": r.enumeration_errors,
        "no_devices_explanation": no_devices_explanation(r),
        "host": {
            "memlock": memlock,
            "iommu": iommu,
            "dev_shm": shm,
            "dev_infiniband": {
                "present": h.dev_infiniband.is_some(),
                "entries": h.dev_infiniband.clone().unwrap_or_default(),
                "warning": dev_infiniband_finding(h.dev_infiniband.is_some(), !r.devices.is_empty()).map(|f| f.text),
            },
            "gpu_direct": {
                "plugin_offers_gpu_memory": true,
                "nvidia_driver_loaded": h.gpu.nvidia_driver,
                "nvidia_peermem_loaded": h.gpu.peermem,
                "description": gpu_description(r),
            },
            "env": {
                "nccl_net_plugin": h.env.net_plugin,
                "nccl_net": h.env.net,
                "nccl_ib_hca": h.env.ib_hca,
                "nccl_socket_ifname": h.env.socket_ifname,
                "ferro_ibverbs_lib": lib.override_value,
            },
        },
        "node": r.node.as_ref().map(|f| node::node_json(f, &report_checks(r))),
        "warnings": warnings(r),
        "verdict": {
            "ok": o.ok,
            "usable_ports": o.usable_ports,
            "lines": verdict_lines(r).into_iter().map(|v| v.line).collect::<Vec<_>>(),
            "summary": o.summary,
            "node_status": node_status(r).map(Status::name),
            "node_summary": node_summary(r),
            "exit_code": exit_code(r),
            "gdr_policy": r.gdr_policy.name(),
        },
    })
}

pub(crate) fn device_json(d: &Device) -> Value {
    json!({
        "name": d.name,
        "listed_by_libibverbs": d.listed_by_verbs,
        "node_guid": d.node_guid.map(format_guid),
        "sys_image_guid": d.sys_image_guid.map(format_guid),
        "fw_ver": d.fw_ver,
        "max_qp": d.max_qp,
        "pci_path": d.pci_path,
        "error": d.error,
        "notes": d.notes,
        "gdr": d.gdr,
        "ptr_support": d.ptr_support,
        "ports": d.ports.iter().map(|p| port_json(d, p)).collect::<Vec<_>>(),
    })
}

pub(crate) fn port_json(d: &Device, p: &Port) -> Value {
    let chosen = p.gid.as_ref().ok().map(|c| c.index);
    let v = port_verdict(d, p);
    let reason = port_problem(d, p);
    json!({
        "port": p.num,
        "state": p.state.to_string(),
        "link_layer": p.link_layer.to_string(),
        "speed_mbps": p.speed_mbps,
        "speed_text": p.speed_text,
        "active_mtu": p.active_mtu,
        "lid": p.lid,
        "netdev": p.netdev,
        "gids": p.gids.iter().filter(|g| !g.is_zero()).map(|g| json!({
            "index": g.index,
            "gid": g.raw_text(),
            "compact": g.to_string(),
            "type": gid_type_name(g.gid_type),
            "family": family_name(g),
            "netdev": g.netdev,
            "selected": Some(g.index) == chosen,
        })).collect::<Vec<_>>(),
        "gid_choice": p.gid.as_ref().ok().map(|c| json!({
            "index": c.index,
            "gid": c.gid.to_string(),
            "type": gid_type_name(c.gid.gid_type),
            "reason": c.reason,
        })),
        "gid_error": p.gid.as_ref().err(),
        "usable": v.usable,
        "reason": reason,
        "verdict": v.line,
    })
}

/// [`to_json`], pretty-printed, with a trailing newline.
pub fn render_json(r: &Report) -> String {
    let mut s = serde_json::to_string_pretty(&to_json(r))
        .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
    s.push('\n');
    s
}
