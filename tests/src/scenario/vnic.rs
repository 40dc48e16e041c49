//! virtual-nic: run with `--dev a+b` on a v9+ table, so the rank's device is a virtual NIC that
//! [`super::device_of`] fused with `makeVDevice`. Checks:
//! - its properties: the name `a+b`, the summed speed, `vProps` listing the members, appended
//!   after the devices that existed before;
//! - refused fusions (a repeated member, a member out of range, a virtual member, zero members,
//!   more than the version allows) fail and add no device; a one-member group is accepted;
//! - messages of every size from 0 to 64 MiB, byte for byte, over a connection between two
//!   virtual NICs; the receiver reads every member's own packet counters (the kernel's
//!   `hw_counters`, not the plugin's) around the traffic, and each member must have carried at
//!   least a quarter of its even share of the bytes.

use super::Ctx;
use super::common::*;
use crate::buffer::{Buffer, PAGE, round_up, seed};
use crate::error::{HResult, HarnessError, NcclExt};
use crate::{ensure, raw};
use core::ffi::c_int;
use ferro_ffi::AbiVersion;

/// The sizes moved, each once; the large ones make the counters meaningful.
const SIZES: [usize; 8] = [0, 1, 127, 4097, 65537, 1 << 20, 16 << 20, 64 << 20];

/// A member device's received-packet count from the kernel (`hw_counters/rcvd_pkts`).
fn rcvd_pkts(dev: &str, port: c_int) -> HResult<u64> {
    let path = format!("/sys/class/infiniband/{dev}/ports/{port}/hw_counters/rcvd_pkts");
    let text =
        std::fs::read_to_string(&path).map_err(|e| HarnessError::Failed(format!("{path}: {e}")))?;
    text.trim()
        .parse()
        .map_err(|e| HarnessError::Failed(format!("{path}: {e}")))
}

pub(super) fn run(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let v = net.version();
    ensure!(
        v >= AbiVersion::V9,
        "virtual NICs need a v9+ table (FERRO_NET_ABI), this is v{}",
        v.number()
    );
    let names: Vec<String> = ctx.opts.dev.split('+').map(str::to_string).collect();
    ensure!(names.len() >= 2, "virtual-nic needs --dev a+b");
    let members = names
        .iter()
        .map(|n| net.device_by_name(n))
        .collect::<HResult<Vec<c_int>>>()?;
    let member_props = members
        .iter()
        .map(|&m| net.get_properties(m).call("getProperties"))
        .collect::<HResult<Vec<_>>>()?;

    // Properties.
    let p = &ctx.props;
    let ndev = net.devices().call("devices")?;
    ensure!(
        p.name.as_deref() == Some(ctx.opts.dev.as_str()),
        "virtual NIC named {:?}, expected {:?}",
        p.name,
        ctx.opts.dev
    );
    ensure!(
        p.vdevs.as_deref() == Some(members.as_slice()),
        "vProps {:?}, expected the members {members:?}",
        p.vdevs
    );
    let speed: c_int = member_props.iter().map(|m| m.speed).sum();
    ensure!(
        p.speed == speed,
        "speed {} is not the members' sum {speed}",
        p.speed
    );
    ensure!(
        ctx.dev >= members.len() as c_int && ctx.dev < ndev,
        "virtual NIC index {} is not appended after the physical devices ({ndev} devices)",
        ctx.dev
    );

    // Refused fusions add no device.
    let max = if v >= AbiVersion::V12 { 8 } else { 4 };
    let m0 = members[0];
    for (what, r) in [
        ("a repeated member", net.make_vdevice(&[m0, m0])),
        ("a member out of range", net.make_vdevice(&[m0, 999])),
        ("a virtual member", net.make_vdevice(&[m0, ctx.dev])),
        ("zero members", raw::make_vdevice(net.table(), 0, &[])),
        (
            "more members than the version allows",
            raw::make_vdevice(net.table(), max + 1, &[]),
        ),
    ] {
        ensure!(r.is_err(), "makeVDevice of {what} was accepted: {r:?}");
    }
    let after = net.devices().call("devices")?;
    ensure!(
        after == ndev,
        "refused fusions changed devices() from {ndev} to {after}"
    );
    // A one-member group, as NCCL 2.24-2.26 ask for every device once any is fused.
    let single = net.make_vdevice(&[m0]).call("makeVDevice of one device")?;
    let sp = net.get_properties(single).call("getProperties")?;
    ensure!(
        single == ndev
            && sp.name.as_deref() == Some(names[0].as_str())
            && sp.vdevs.as_deref() == Some(&[m0][..])
            && sp.speed == member_props[0].speed,
        "one-member virtual NIC: index {single} (expected {ndev}), name {:?}, vProps {:?}, speed {}",
        sp.name,
        sp.vdevs,
        sp.speed
    );

    // Traffic over both virtual NICs, with the members' packet counters around it.
    let id = ctx.opts.scenario.id();
    let (send, recv) = if ctx.is_receiver() {
        (
            None,
            Some(net.accept_blocking(ctx.listen()?, CONNECT_TIMEOUT)?),
        )
    } else {
        let mut h = ctx.peer_handle();
        (
            Some(net.connect_blocking(ctx.dev, &mut h, CONNECT_TIMEOUT)?),
            None,
        )
    };
    let ports: Vec<c_int> = member_props.iter().map(|m| m.port).collect();
    let counts = |names: &[String]| -> HResult<Vec<u64>> {
        names
            .iter()
            .zip(&ports)
            .map(|(n, &port)| rcvd_pkts(n, port))
            .collect()
    };
    ctx.ctl.barrier("traffic-start", BARRIER_TIMEOUT)?;
    let before = counts(&names)?;
    let mut bytes = 0usize;
    for (i, &size) in SIZES.iter().enumerate() {
        let s = seed(&[id, i as u64]);
        if let Some(rc) = &recv {
            let cap = round_up(size + PAGE, PAGE);
            let buf = Buffer::new(cap)?;
            let mr = net.reg_host(rc, &buf).call("regMr")?;
            recv_checked(net, rc, &buf, cap, &mr, size, s, &format!("size {size}"))?;
            net.dereg_mr(rc, mr).call("deregMr")?;
        }
        if let Some(sc) = &send {
            let buf = Buffer::new(size.max(1))?;
            buf.fill_pattern(0, size, s);
            let mr = net.reg_host(sc, &buf).call("regMr")?;
            send_wait(
                net,
                SendOp {
                    comm: sc,
                    buf: &buf,
                    off: 0,
                    len: size,
                    tag: TAG,
                    mr: &mr,
                },
            )?;
            net.dereg_mr(sc, mr).call("deregMr")?;
        }
        bytes += size;
    }
    ctx.ctl.barrier("traffic-end", BARRIER_TIMEOUT)?;
    let after = counts(&names)?;
    let deltas: Vec<u64> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    // Each member's even share of the bytes, in packets of at most 4096 bytes; a member must
    // have received at least a quarter of that (the other direction's acknowledgements only
    // add to the count).
    let share = (bytes / members.len() / 4096) as u64;
    for (n, d) in names.iter().zip(&deltas) {
        ensure!(
            *d >= share / 4,
            "member {n} received {d} packets for {bytes} bytes over {} members (at least {} expected): the traffic does not use it",
            members.len(),
            share / 4
        );
    }
    if let Some(sc) = send {
        net.close_send(sc).call("closeSend")?;
    }
    if let Some(rc) = recv {
        net.close_recv(rc).call("closeRecv")?;
    }
    // The close line says how the comm's completions spread over the members.
    let line = crate::logger::logs()
        .into_iter()
        .map(|l| l.text)
        .find(|t| t.contains("comm closed") && t.contains("completions per member device"))
        .ok_or_else(|| {
            HarnessError::Failed("no close line with completions per member device".into())
        })?;
    let tail = line[line.find("completions per member device: ").unwrap_or(0)..].to_string();
    for n in &names {
        let count: u64 = tail
            .split(&format!("{n}:"))
            .nth(1)
            .and_then(|r| r.split_whitespace().nth(1))
            .and_then(|c| c.trim_end_matches(',').parse().ok())
            .unwrap_or(0);
        ensure!(count > 0, "close line shows no completions on {n}: {line}");
    }
    let per_member: Vec<String> = names
        .iter()
        .zip(&deltas)
        .map(|(n, d)| format!("{n} {d} packets"))
        .collect();
    Ok(format!(
        "v{} virtual NIC [{}] {} over members {members:?}: {} messages, {bytes} bytes verified; received on each member: {}; close line: {tail}",
        v.number(),
        ctx.dev,
        ctx.opts.dev,
        SIZES.len(),
        per_member.join(", ")
    ))
}
