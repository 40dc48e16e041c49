//! Helpers shared by the in-process guest tests. They drive the plugin's table linked into the
//! test binary through the NCCL stand-in (`ferro-nccl-standin`, the same one the dlopen harness
//! and the benchmark use) for setup, and through thin raw-pointer wrappers for the data path (tests
//! that count allocations or deliberately misuse the table need the raw calls).
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use core::ffi::{c_int, c_void};
use ferro_ffi::ncclResult_t;
use ferro_nccl_standin::net::Comm as _;
use ferro_nccl_standin::{Net, raw};
use nccl_net_ferro::ncclNetPlugin_v8 as NET;
use std::process::{Child, Command, Output};
use std::ptr::null_mut;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[allow(
    unused_imports,
    reason = "used by some of the test binaries that include this module"
)]
pub use ferro_nccl_standin::Handle;

pub fn ok(r: ncclResult_t, what: &str) {
    assert_eq!(r, ncclResult_t::Success, "{what}");
}

/// The linked table, through the NCCL stand-in.
pub fn net() -> &'static Net {
    static N: OnceLock<Net> = OnceLock::new();
    N.get_or_init(|| Net::linked(&NET))
}

/// The device under test: `FERRO_TEST_DEV` (default rxe0). `init` without a logger, so the
/// plugin's lines go to stderr (tests read them from child processes).
pub fn test_dev() -> c_int {
    let want = std::env::var("FERRO_TEST_DEV").unwrap_or_else(|_| "rxe0".into());
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe0").exists(),
        "needs the soft-RoCE guest (run the README's test command)"
    );
    if let Err(code) = net().init_with(None) {
        panic!("init returned {code:?}");
    }
    net()
        .device_by_name(&want)
        .unwrap_or_else(|e| panic!("{want}: {e}"))
}

/// A connected send/receive comm pair on one device, and the listen comm.
pub struct Pair {
    pub send: *mut c_void,
    pub recv: *mut c_void,
    pub listen: *mut c_void,
}

pub fn pair(dev: c_int) -> Pair {
    let (mut handle, listen) = net().listen(dev).expect("listen");
    let (s, r) = net()
        .connect_accept_blocking(dev, &mut handle, &listen, Duration::from_secs(60))
        .expect("connect/accept");
    Pair {
        send: s.as_ptr(),
        recv: r.as_ptr(),
        listen: listen.as_ptr(),
    }
}

/// Tests `req` until done, with `sizes` as `test`'s sizes array.
pub fn wait(req: *mut c_void, sizes: &mut [c_int]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "request did not complete");
        // SAFETY: req came from isend/irecv; sizes has room for its buffers.
        match unsafe { raw::test(&NET, req, sizes.as_mut_ptr()) } {
            Ok(0) => {}
            Ok(_) => return,
            Err(code) => panic!("test returned {code:?}"),
        }
    }
}

pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed)
                .to_le_bytes()[1]
        })
        .collect()
}

/// Registers `len` bytes at `p` (host memory) on `comm`.
pub fn reg(comm: *mut c_void, p: *const u8, len: usize) -> *mut c_void {
    // SAFETY: the caller keeps the buffer alive until it deregisters.
    unsafe { raw::reg_mr(&NET, comm, p.cast_mut().cast(), len, 1) }.expect("regMr")
}

/// Registers a whole buffer on `comm`.
pub fn reg_buf(comm: *mut c_void, buf: &mut [u8]) -> *mut c_void {
    reg(comm, buf.as_ptr(), buf.len())
}

pub fn dereg(comm: *mut c_void, mh: *mut c_void) {
    // SAFETY: mh came from regMr on this comm.
    unsafe { raw::dereg_mr(&NET, comm, mh) }.expect("deregMr");
}

/// One buffer of a receive: address, size, tag, memory handle.
pub type RecvArg = (*mut u8, usize, c_int, *mut c_void);

/// One `irecv` call: its result code and request (NULL: retry).
pub fn try_irecv(comm: *mut c_void, bufs: &[RecvArg]) -> (ncclResult_t, *mut c_void) {
    let mut data: Vec<*mut c_void> = bufs.iter().map(|b| b.0.cast()).collect();
    let mut sizes: Vec<c_int> = bufs.iter().map(|b| b.1 as c_int).collect();
    let mut tags: Vec<c_int> = bufs.iter().map(|b| b.2).collect();
    let mut mhs: Vec<*mut c_void> = bufs.iter().map(|b| b.3).collect();
    // SAFETY: arrays of n elements; buffers registered.
    let r = unsafe { raw::irecv(&NET, comm, &mut data, &mut sizes, &mut tags, &mut mhs) };
    split(r)
}

/// One `isend` call: its result code and request (NULL: retry).
pub fn try_isend(
    comm: *mut c_void,
    data: *const u8,
    size: usize,
    tag: c_int,
    mh: *mut c_void,
) -> (ncclResult_t, *mut c_void) {
    // SAFETY: the buffer is registered under mh.
    split(unsafe { raw::isend(&NET, comm, data.cast_mut().cast(), size as c_int, tag, mh) })
}

/// A raw call's outcome as NCCL sees it: the result code, and the request (NULL on error).
fn split(r: raw::NetResult<*mut c_void>) -> (ncclResult_t, *mut c_void) {
    match r {
        Ok(req) => (ncclResult_t::Success, req),
        Err(code) => (code, null_mut()),
    }
}

/// `irecv` until it gives a request.
pub fn post_irecv(comm: *mut c_void, bufs: &[RecvArg]) -> *mut c_void {
    loop {
        let (r, req) = try_irecv(comm, bufs);
        ok(r, "irecv");
        if !req.is_null() {
            return req;
        }
    }
}

/// `isend` until it gives a request.
pub fn post_isend(
    comm: *mut c_void,
    data: *const u8,
    size: usize,
    tag: c_int,
    mh: *mut c_void,
) -> *mut c_void {
    loop {
        let (r, req) = try_isend(comm, data, size, tag, mh);
        ok(r, "isend");
        if !req.is_null() {
            return req;
        }
    }
}

/// One `test` call: its result code, and the sizes when done.
pub fn try_test(req: *mut c_void) -> (ncclResult_t, Option<[c_int; 8]>) {
    let mut sizes = [0 as c_int; 8];
    // SAFETY: req came from isend/irecv and was not yet reported done.
    match unsafe { raw::test(&NET, req, sizes.as_mut_ptr()) } {
        Ok(done) => (ncclResult_t::Success, (done != 0).then_some(sizes)),
        Err(code) => (code, None),
    }
}

/// One message of `send_len` bytes from `sbuf` into a receive of `recv_len` bytes at `rbuf`
/// with `tag`: post both, wait for both; returns the sizes the two sides report.
pub fn transfer(
    p: &Pair,
    (sbuf, smh, send_len): (*const u8, *mut c_void, usize),
    (rbuf, rmh, recv_len): (*mut u8, *mut c_void, usize),
    tag: c_int,
) -> (c_int, c_int) {
    let rreq = post_irecv(p.recv, &[(rbuf, recv_len, tag, rmh)]);
    let sreq = post_isend(p.send, sbuf, send_len, tag, smh);
    let mut sizes = [0 as c_int; 8];
    wait(sreq, &mut sizes);
    let sent = sizes[0];
    wait(rreq, &mut sizes);
    (sent, sizes[0])
}

/// Moves one 64 KiB message over `p` (tag 1), checks its size on both sides and every byte,
/// and returns the two registrations (for [`release`]).
pub fn one_message(p: &Pair, seed: u32) -> (*mut c_void, *mut c_void) {
    let len = 64 << 10;
    let mut sbuf = pattern(seed, len);
    let mut rbuf = vec![0u8; len];
    let smh = reg_buf(p.send, &mut sbuf);
    let rmh = reg_buf(p.recv, &mut rbuf);
    let sizes = transfer(
        p,
        (sbuf.as_ptr(), smh, len),
        (rbuf.as_mut_ptr(), rmh, len),
        1,
    );
    assert_eq!(sizes, (len as c_int, len as c_int));
    assert!(rbuf == sbuf, "the received data differs");
    (smh, rmh)
}

/// The netdev of rxe1 in the test bed, which the port tests take down and bring back.
pub const LINK: &str = "dummy1";

/// Brings [`LINK`] back up when dropped, whatever the test did.
pub struct LinkUp;

impl Drop for LinkUp {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "set", LINK, "up"])
            .status();
    }
}

/// Sets [`LINK`] `up` or `down`, keeping its IPv6 address (and so rxe1's IPv6 GID) while it
/// is down.
pub fn ip_link(state: &str) {
    let _ = std::fs::write(
        format!("/proc/sys/net/ipv6/conf/{LINK}/keep_addr_on_down"),
        "1",
    );
    let s = Command::new("ip")
        .args(["link", "set", LINK, state])
        .status()
        .unwrap();
    assert!(s.success(), "ip link set {LINK} {state}");
}

/// rxe1's port 1 state as the kernel shows it (`4: ACTIVE`, `1: DOWN`, ...).
pub fn rxe1_port_state() -> String {
    std::fs::read_to_string("/sys/class/infiniband/rxe1/ports/1/state").unwrap_or_default()
}

/// Brings [`LINK`] up and waits (at most 30 s) until rxe1's port is ACTIVE again.
pub fn link_up_and_active() {
    ip_link("up");
    let up = Instant::now();
    while !rxe1_port_state().contains("ACTIVE") {
        assert!(
            up.elapsed() < Duration::from_secs(30),
            "rxe1 port 1 did not come back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Takes [`LINK`] down under a waiting receive `rreq` and a send of `len` bytes with tag 2
/// (which waits for a buffer), and calls both until each has failed; both must within 10 s.
/// Returns how long after the link went down each failed (send, receive).
pub fn link_down_fails_both_sides(
    p: &Pair,
    sbuf: *const u8,
    len: usize,
    smh: *mut c_void,
    rreq: *mut c_void,
) -> (Duration, Duration) {
    ip_link("down");
    let down = Instant::now();
    let (mut send_err, mut recv_err) = (None, None);
    while send_err.is_none() || recv_err.is_none() {
        assert!(
            down.elapsed() < Duration::from_secs(10),
            "both sides must fail within 10 s of the port going down (send {send_err:?}, receive {recv_err:?})"
        );
        if send_err.is_none() {
            let (r, req) = try_isend(p.send, sbuf, len, 2, smh);
            assert!(req.is_null());
            if r != ncclResult_t::Success {
                send_err = Some(down.elapsed());
            }
        }
        if recv_err.is_none() && try_test(rreq).0 != ncclResult_t::Success {
            recv_err = Some(down.elapsed());
        }
    }
    (send_err.unwrap(), recv_err.unwrap())
}

/// Closes the pair's comms.
pub fn close(p: &Pair) {
    // SAFETY: comms of this pair, closed once.
    unsafe {
        ok(NET.closeSend.unwrap()(p.send), "closeSend");
        ok(NET.closeRecv.unwrap()(p.recv), "closeRecv");
        ok(NET.closeListen.unwrap()(p.listen), "closeListen");
    }
}

/// Deregisters the pair's two buffers and closes the pair.
pub fn release(p: &Pair, smh: *mut c_void, rmh: *mut c_void) {
    dereg(p.send, smh);
    dereg(p.recv, rmh);
    close(p);
}

/// The variable that tells a child process of a test binary which role to play.
pub const CHILD_ROLE: &str = "FERRO_TEST_CHILD";

/// This test binary, running only `test` as `role` (in `CHILD_ROLE`), with `env`; the plugin's
/// INFO lines go to stderr.
pub fn child(test: &str, role: &str, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ROLE, role)
        .env("FERRO_LOG_STDERR", "1");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// Runs this binary's `test` as a child playing `role` with `env`, checks that it exited 0 and
/// printed `marker` (its last step), and returns its output (stdout, then stderr). `what`
/// names the run in the failure message (the settings it was made with).
pub fn child_passes(
    test: &str,
    role: &str,
    env: &[(&str, &str)],
    marker: &str,
    what: &str,
) -> String {
    let out = child(test, role, env).output().unwrap();
    let t = text(&out);
    assert!(out.status.success() && t.contains(marker), "{what}:\n{t}");
    t
}

/// A finished child's stdout and stderr, one after the other.
pub fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Reads the child's stdout until a line containing `word`; returns what follows it.
pub fn read_until(
    child: &mut Child,
    lines: &mut impl Iterator<Item = String>,
    word: &str,
) -> String {
    for l in lines.by_ref() {
        if let Some(at) = l.find(word) {
            return l[at + word.len()..].trim().to_string();
        }
    }
    let _ = child.kill();
    panic!("the child ended before printing {word:?}");
}

/// Panics outside the soft-RoCE guest, saying what the test needs.
pub fn in_guest() {
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe0").exists(),
        "needs the soft-RoCE guest (run the README's test command)"
    );
}
