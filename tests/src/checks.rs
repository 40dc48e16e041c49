//! Bad-input checks shared by the host tests (no RDMA device: init failed) and the guest tests
//! (live devices): each call must return a known error code, never success, never crash.

use crate::blocking::Backoff;
use crate::buffer::{Buffer, Rng};
use crate::handle::Handle;
use crate::logger;
use crate::net::Net;
use crate::raw;
use core::ffi::{c_int, c_void};
use ferro_ffi::{log_level, ncclResult_t};
use std::time::Duration;

fn known_error(what: &str, r: ncclResult_t, problems: &mut Vec<String>) {
    if r == ncclResult_t::Success {
        problems.push(format!("{what}: returned ncclSuccess, expected an error"));
    } else if r.name().is_none() || r == ncclResult_t::InProgress {
        problems.push(format!(
            "{what}: returned {r:?}, not an ncclResult_t error code"
        ));
    }
}

/// Calls `connect(dev, handle)` until it returns an error (pass), a comm (problem; it is
/// closed), or `timeout` passes (problem), and checks that a WARN line was logged.
pub fn connect_must_fail(
    net: &Net,
    dev: c_int,
    mut handle: Handle,
    what: &str,
    timeout: Duration,
    problems: &mut Vec<String>,
) {
    let mark = logger::log_mark();
    let mut b = Backoff::new(what, timeout);
    loop {
        match net.connect(dev, &mut handle) {
            Err(code) => {
                known_error(what, code, problems);
                let warned = logger::logs_since(mark)
                    .iter()
                    .any(|l| l.level == log_level::WARN);
                if !warned {
                    problems.push(format!(
                        "{what}: failed with {code:?} but logged no WARN line"
                    ));
                }
                return;
            }
            Ok(Some(comm)) => {
                problems.push(format!("{what}: connect returned a send comm"));
                let _ = net.close_send(comm);
                return;
            }
            Ok(None) => {
                if b.pause().is_err() {
                    problems.push(format!("{what}: connect kept asking to be called again for {timeout:?}, never failed"));
                    return;
                }
            }
        }
    }
}

/// A raw call's result code.
fn code<T>(r: raw::NetResult<T>) -> ncclResult_t {
    r.map_or_else(|c| c, |_| ncclResult_t::Success)
}

/// Runs every bad-input check; returns the problems found (empty = all good). `dev` is a device
/// index to use where one is needed (0 on a host without devices).
pub fn bad_input_problems(net: &Net, dev: c_int, ndev: c_int) -> Vec<String> {
    let mut p = Vec::new();
    let t = net.table();

    for bad in [-1, ndev, 99, c_int::MAX, c_int::MIN] {
        match net.get_properties(bad) {
            Ok(props) => p.push(format!("getProperties({bad}) succeeded: {props:?}")),
            Err(code) => known_error(&format!("getProperties({bad})"), code, &mut p),
        }
    }
    // SAFETY: deliberately NULL props; the plugin must check it and fail.
    if let Some(r) = unsafe { t.get_properties_raw(dev, std::ptr::null_mut()) } {
        known_error("getProperties(dev, NULL)", r, &mut p);
    }
    if let Some(f) = t.devices_fn() {
        // SAFETY: deliberately NULL ndev.
        let r = unsafe { f(std::ptr::null_mut()) };
        known_error("devices(NULL)", r, &mut p);
    }

    let mut rng = Rng::new(0xbad_da7a);
    let mut random = Handle::zeroed();
    random.0.copy_from_slice(&rng.bytes(128));
    connect_must_fail(
        net,
        dev,
        random,
        "connect(random 128-byte handle)",
        Duration::from_secs(10),
        &mut p,
    );
    connect_must_fail(
        net,
        dev,
        Handle::zeroed(),
        "connect(all-zero handle)",
        Duration::from_secs(10),
        &mut p,
    );

    let mut sizes = [0 as c_int; 8];
    // SAFETY: deliberately NULL request with valid out-pointers.
    let r = unsafe { raw::test(t, std::ptr::null_mut(), sizes.as_mut_ptr()) };
    known_error("test(NULL)", code(r), &mut p);
    for (name, kind) in [
        ("closeSend", raw::CommKind::Send),
        ("closeRecv", raw::CommKind::Recv),
        ("closeListen", raw::CommKind::Listen),
    ] {
        // SAFETY: deliberately NULL comm.
        let r = unsafe { raw::close(t, kind, std::ptr::null_mut()) };
        known_error(&format!("{name}(NULL)"), code(r), &mut p);
    }

    // SAFETY: deliberately NULL listen comm.
    let r = unsafe { raw::accept(t, std::ptr::null_mut()) };
    known_error("accept(NULL)", code(r), &mut p);
    let mut h = Handle::zeroed();
    // SAFETY: deliberately NULL listenComm out-pointer with a valid handle buffer.
    if let Some(r) = unsafe { t.listen_raw(dev, h.as_mut_ptr(), std::ptr::null_mut()) } {
        known_error("listen(dev, handle, NULL)", r, &mut p);
    }
    let buf = match Buffer::new(4096) {
        Ok(b) => b,
        Err(e) => {
            p.push(e);
            return p;
        }
    };
    let data = buf.base();
    // SAFETY: deliberately NULL comm; data is a live page.
    let r = unsafe {
        raw::reg_mr(
            t,
            std::ptr::null_mut(),
            data,
            4096,
            ferro_ffi::NCCL_PTR_HOST,
        )
    };
    known_error("regMr(NULL comm)", code(r), &mut p);
    // SAFETY: deliberately NULL comm and mhandle.
    let r = unsafe { raw::dereg_mr(t, std::ptr::null_mut(), std::ptr::null_mut()) };
    known_error("deregMr(NULL, NULL)", code(r), &mut p);
    // SAFETY: deliberately NULL comm; data is a live page.
    let r = unsafe { raw::isend(t, std::ptr::null_mut(), data, 16, 0, std::ptr::null_mut()) };
    known_error("isend(NULL comm)", code(r), &mut p);
    let mut datas = [data];
    let mut rsizes: [c_int; 1] = [16];
    let mut tags: [c_int; 1] = [0];
    let mut mhs: [*mut c_void; 1] = [std::ptr::null_mut()];
    // SAFETY: deliberately NULL comm; one-entry arrays.
    let r = unsafe {
        raw::irecv(
            t,
            std::ptr::null_mut(),
            &mut datas,
            &mut rsizes,
            &mut tags,
            &mut mhs,
        )
    };
    known_error("irecv(NULL comm)", code(r), &mut p);
    // A refused isend/irecv still writes *request (NULL), whatever it held: NULL and a comm
    // that is not the plugin's (a zeroed block: no magic word).
    let preset = 0x5a5a_0000_usize as *mut c_void;
    let junk = [0u64; 16];
    for (what, comm) in [
        ("NULL comm", std::ptr::null_mut()),
        ("a foreign comm", junk.as_ptr().cast_mut().cast::<c_void>()),
    ] {
        // SAFETY: the comm is NULL or readable memory without the plugin's magic; data is live.
        let got = unsafe { raw::request_after_refusal(t, comm, data, preset) };
        for ((code, req), call) in got.into_iter().zip(["isend", "irecv"]) {
            known_error(&format!("{call}({what})"), code, &mut p);
            if !req.is_null() {
                p.push(format!(
                    "{call}({what}) returned {code:?} but left *request = {req:?} (must write NULL)"
                ));
            }
        }
    }
    let mut req: *mut c_void = preset;
    if let Some(f) = t.iflush_fn() {
        // SAFETY: deliberately NULL comm; one-entry arrays; valid out-pointer.
        let r = unsafe {
            f(
                std::ptr::null_mut(),
                1,
                datas.as_mut_ptr(),
                rsizes.as_mut_ptr(),
                mhs.as_mut_ptr(),
                &mut req,
            )
        };
        if r == ncclResult_t::Success && req.is_null() {
            // "Nothing to flush" is a legal answer for a host-only plugin.
        } else {
            known_error("iflush(NULL comm)", r, &mut p);
            if !req.is_null() {
                p.push(format!(
                    "iflush(NULL comm) returned {r:?} but left *request = {req:?} (must write NULL)"
                ));
            }
        }
    }
    p
}
