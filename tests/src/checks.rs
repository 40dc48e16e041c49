//! Bad-input checks shared by the host tests (no RDMA device: init failed) and the guest tests
//! (live devices): each call must return a known error code, never success, never crash.

use crate::buffer::{Buffer, Rng};
use crate::handle::Handle;
use crate::logger;
use crate::net::{Backoff, Net};
use core::ffi::{c_int, c_void};
use ferro_ffi::{log_level, ncclNetDeviceHandle_v8_t, ncclResult_t};
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
    if let Some(f) = t.getProperties {
        // SAFETY: deliberately NULL props; the plugin must check it and fail.
        let r = unsafe { f(dev, std::ptr::null_mut()) };
        known_error("getProperties(dev, NULL)", r, &mut p);
    }
    if let Some(f) = t.devices {
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

    let mut done: c_int = -1;
    let mut sizes = [0 as c_int; 8];
    if let Some(f) = t.test {
        // SAFETY: deliberately NULL request with valid out-pointers.
        let r = unsafe { f(std::ptr::null_mut(), &mut done, sizes.as_mut_ptr()) };
        known_error("test(NULL)", r, &mut p);
    }
    for (name, f) in [
        ("closeSend", t.closeSend),
        ("closeRecv", t.closeRecv),
        ("closeListen", t.closeListen),
    ] {
        if let Some(f) = f {
            // SAFETY: deliberately NULL comm.
            let r = unsafe { f(std::ptr::null_mut()) };
            known_error(&format!("{name}(NULL)"), r, &mut p);
        }
    }

    let mut out: *mut c_void = std::ptr::null_mut();
    let mut dev_out: *mut ncclNetDeviceHandle_v8_t = std::ptr::null_mut();
    if let Some(f) = t.accept {
        // SAFETY: deliberately NULL listen comm; valid out-pointers.
        let r = unsafe { f(std::ptr::null_mut(), &mut out, &mut dev_out) };
        known_error("accept(NULL)", r, &mut p);
    }
    if let Some(f) = t.listen {
        let mut h = Handle::zeroed();
        // SAFETY: deliberately NULL listenComm out-pointer with a valid handle buffer.
        let r = unsafe { f(dev, h.as_mut_ptr(), std::ptr::null_mut()) };
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
    if let Some(f) = t.regMr {
        // SAFETY: deliberately NULL comm; data is a live page; valid out-pointer.
        let r = unsafe {
            f(
                std::ptr::null_mut(),
                data,
                4096,
                ferro_ffi::NCCL_PTR_HOST,
                &mut out,
            )
        };
        known_error("regMr(NULL comm)", r, &mut p);
    }
    if let Some(f) = t.deregMr {
        // SAFETY: deliberately NULL comm and mhandle.
        let r = unsafe { f(std::ptr::null_mut(), std::ptr::null_mut()) };
        known_error("deregMr(NULL, NULL)", r, &mut p);
    }
    let mut req: *mut c_void = std::ptr::null_mut();
    if let Some(f) = t.isend {
        // SAFETY: deliberately NULL comm; data is a live page; valid out-pointer.
        let r = unsafe {
            f(
                std::ptr::null_mut(),
                data,
                16,
                0,
                std::ptr::null_mut(),
                &mut req,
            )
        };
        known_error("isend(NULL comm)", r, &mut p);
    }
    let mut datas = [data];
    let mut rsizes: [c_int; 1] = [16];
    let mut tags: [c_int; 1] = [0];
    let mut mhs: [*mut c_void; 1] = [std::ptr::null_mut()];
    if let Some(f) = t.irecv {
        // SAFETY: deliberately NULL comm; one-entry arrays; valid out-pointer.
        let r = unsafe {
            f(
                std::ptr::null_mut(),
                1,
                datas.as_mut_ptr(),
                rsizes.as_mut_ptr(),
                tags.as_mut_ptr(),
                mhs.as_mut_ptr(),
                &mut req,
            )
        };
        known_error("irecv(NULL comm)", r, &mut p);
    }
    if let Some(f) = t.iflush {
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
        }
    }
    p
}
