//! Checks the hand-written verbs types against the system `<infiniband/verbs.h>`: a C program
//! compiled here prints `sizeof`/`offsetof` for every type and field we define, and each must equal
//! the Rust value. Needs a C compiler and the libibverbs development headers (installed by the
//! test bed's provisioning); their absence is a failure, not a skip.

use ferro_verbs::sys::*;
use std::collections::HashMap;
use std::mem::{offset_of, size_of};
use std::process::Command;

macro_rules! fields {
    ($out:ident, $ty:ident { $($f:ident),* $(,)? }) => {{
        $out.push((format!("sizeof {}", stringify!($ty)), size_of::<$ty>()));
        $( $out.push((format!("offsetof {}.{}", stringify!($ty), stringify!($f)), offset_of!($ty, $f))); )*
    }};
}

fn rust_layout() -> Vec<(String, usize)> {
    let mut v = Vec::new();
    fields!(
        v,
        ibv_context_ops {
            poll_cq,
            req_notify_cq,
            post_send,
            post_recv
        }
    );
    fields!(
        v,
        ibv_context {
            device,
            ops,
            cmd_fd,
            async_fd,
            num_comp_vectors
        }
    );
    fields!(v, ibv_pd { context, handle });
    fields!(
        v,
        ibv_mr {
            context,
            pd,
            addr,
            length,
            handle,
            lkey,
            rkey
        }
    );
    fields!(
        v,
        ibv_cq {
            context,
            channel,
            cq_context,
            handle,
            cqe,
            comp_events_completed,
            async_events_completed
        }
    );
    fields!(
        v,
        ibv_qp {
            context,
            qp_context,
            pd,
            send_cq,
            recv_cq,
            srq,
            handle,
            qp_num,
            state,
            qp_type,
            events_completed
        }
    );
    fields!(v, ibv_gid { raw });
    fields!(
        v,
        ibv_device_attr {
            fw_ver,
            node_guid,
            sys_image_guid,
            max_mr_size,
            vendor_id,
            vendor_part_id,
            max_qp,
            max_qp_wr,
            max_sge,
            max_cqe,
            max_mr,
            max_qp_rd_atom,
            max_qp_init_rd_atom,
            atomic_cap,
            max_srq_sge,
            max_pkeys,
            local_ca_ack_delay,
            phys_port_cnt
        }
    );
    fields!(
        v,
        ibv_qp_cap {
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data
        }
    );
    fields!(
        v,
        ibv_qp_init_attr {
            qp_context,
            send_cq,
            recv_cq,
            srq,
            cap,
            qp_type,
            sq_sig_all
        }
    );
    fields!(
        v,
        ibv_global_route {
            dgid,
            flow_label,
            sgid_index,
            hop_limit,
            traffic_class
        }
    );
    fields!(
        v,
        ibv_ah_attr {
            grh,
            dlid,
            sl,
            src_path_bits,
            static_rate,
            is_global,
            port_num
        }
    );
    fields!(
        v,
        ibv_qp_attr {
            qp_state,
            cur_qp_state,
            path_mtu,
            path_mig_state,
            qkey,
            rq_psn,
            sq_psn,
            dest_qp_num,
            qp_access_flags,
            cap,
            ah_attr,
            alt_ah_attr,
            pkey_index,
            alt_pkey_index,
            en_sqd_async_notify,
            sq_draining,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_timer,
            port_num,
            timeout,
            retry_cnt,
            rnr_retry,
            alt_port_num,
            alt_timeout,
            rate_limit
        }
    );
    fields!(v, ibv_sge { addr, length, lkey });
    fields!(
        v,
        ibv_send_wr {
            wr_id,
            next,
            sg_list,
            num_sge,
            opcode,
            send_flags,
            imm_data,
            wr,
            qp_type_xrc_remote_srqn
        }
    );
    fields!(
        v,
        ibv_recv_wr {
            wr_id,
            next,
            sg_list,
            num_sge
        }
    );
    fields!(
        v,
        ibv_wc {
            wr_id,
            status,
            opcode,
            vendor_err,
            byte_len,
            imm_data,
            qp_num,
            src_qp,
            wc_flags,
            pkey_index,
            slid,
            sl,
            dlid_path_bits
        }
    );
    fields!(
        v,
        ibv_async_event {
            element,
            event_type
        }
    );
    fields!(
        v,
        ibv_gid_entry {
            gid,
            gid_index,
            port_num,
            gid_type,
            ndev_ifindex
        }
    );
    // The port attributes: the compat prefix must match exactly; our struct may be longer.
    for (name, off) in [
        ("state", offset_of!(ibv_port_attr, state)),
        ("active_mtu", offset_of!(ibv_port_attr, active_mtu)),
        ("gid_tbl_len", offset_of!(ibv_port_attr, gid_tbl_len)),
        ("lid", offset_of!(ibv_port_attr, lid)),
        ("active_width", offset_of!(ibv_port_attr, active_width)),
        ("active_speed", offset_of!(ibv_port_attr, active_speed)),
        ("phys_state", offset_of!(ibv_port_attr, phys_state)),
        ("link_layer", offset_of!(ibv_port_attr, link_layer)),
        ("flags", offset_of!(ibv_port_attr, flags)),
        (
            "port_cap_flags2",
            offset_of!(ibv_port_attr, port_cap_flags2),
        ),
    ] {
        v.push((format!("offsetof ibv_port_attr.{name}"), off));
    }
    v
}

/// C expressions for the same names. Unions and renamed fields map to their C spelling.
fn c_expr(key: &str) -> String {
    let (kind, rest) = key.split_once(' ').unwrap_or(("", key));
    if kind == "sizeof" {
        return format!("sizeof(struct {rest})");
    }
    let (ty, field) = rest.split_once('.').unwrap_or((rest, ""));
    let cfield = match (ty, field) {
        ("ibv_context", "device") => "device",
        ("ibv_send_wr", "qp_type_xrc_remote_srqn") => "qp_type.xrc.remote_srqn",
        ("ibv_gid", "raw") => "raw",
        (_, "event_type") => "event_type",
        (_, "element") => "element",
        (_, f) => f,
    };
    if ty == "ibv_gid" {
        return "offsetof(union ibv_gid, raw)".to_string();
    }
    format!("offsetof(struct {ty}, {cfield})")
}

#[test]
fn verbs_types_match_system_headers() {
    let rust = rust_layout();
    let dir = std::env::temp_dir().join(format!("ferro-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void){\n",
    );
    for (k, _) in &rust {
        let expr = if k == "sizeof ibv_gid" {
            "sizeof(union ibv_gid)".to_string()
        } else {
            c_expr(k)
        };
        src.push_str(&format!("printf(\"{k}=%zu\\n\", (size_t)({expr}));\n"));
    }
    src.push_str("printf(\"sizeof compat_port_attr_end=%zu\\n\", offsetof(struct ibv_port_attr, flags) + 1);\nreturn 0;}\n");
    let c_file = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&c_file, src).expect("write C file");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc).arg(&c_file).arg("-o").arg(&exe).output().unwrap_or_else(|e| {
        panic!("cannot run the C compiler `{cc}` ({e}); install gcc and libibverbs-dev (testbed/host/provision.sh does)")
    });
    assert!(
        out.status.success(),
        "compiling the layout probe against <infiniband/verbs.h> failed (is libibverbs-dev installed?):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run layout probe");
    assert!(run.status.success());
    let text = String::from_utf8_lossy(&run.stdout);
    let c: HashMap<&str, usize> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k, v.trim().parse().expect("number")))
        .collect();
    let mut mismatches = Vec::new();
    for (k, rv) in &rust {
        let cv = c.get(k.as_str()).copied().unwrap_or(usize::MAX);
        if cv != *rv {
            mismatches.push(format!("{k}: rust {rv}, C {cv}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "layout mismatches:\n{}",
        mismatches.join("\n")
    );
    assert!(
        size_of::<ibv_port_attr>() >= c["sizeof compat_port_attr_end"],
        "ibv_port_attr too small for the compat prefix"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
