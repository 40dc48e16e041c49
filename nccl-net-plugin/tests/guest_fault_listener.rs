//! Only holders of the listen handle can connect, on soft-RoCE (guest only): a client that
//! speaks the wire format but has the wrong listen secret is refused while the real peer
//! connects.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::c_void;
use nccl_net_ferro::ncclNetPlugin_v8 as NET;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

mod common;
use common::*;

// Only holders of the listen handle can connect

#[test]
fn a_client_with_the_wrong_listen_secret_is_refused_while_the_real_peer_connects() {
    use ferro_proto::handle;
    use ferro_proto::wire::{self, DevMeta, Msg, QpMeta};
    use std::io::{Read as _, Write as _};
    in_guest();
    let dev = test_dev();
    let mut h = [0u8; 128];
    let mut listen: *mut c_void = null_mut();
    // SAFETY: valid out-pointers.
    ok(
        unsafe { NET.listen.unwrap()(dev, h.as_mut_ptr().cast(), &mut listen) },
        "listen",
    );
    let addr = handle::decode(&h).unwrap();
    // A client that speaks the wire format perfectly, but does not hold the handle.
    let mut secret = handle::secret(&h);
    secret[0] ^= 0xff;
    let forged = Msg::Connect(QpMeta {
        qps_per_conn: 1,
        split: false,
        path: Default::default(),
        devs: vec![DevMeta {
            link_layer: 2,
            port: 1,
            lid: 0,
            mtu: 1024,
            gid: [0; 16],
            gid_index: 1,
            mr_rkey: 1,
        }],
        mr_addr: 0x1000,
        qpns: vec![17],
        eces: Vec::new(),
        secret,
    });
    let mut stray = std::net::TcpStream::connect(addr).unwrap();
    stray.write_all(&wire::encode(&forged)).unwrap();
    stray
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    // The real peer connects while the listener also handles the stray.
    let (mut send, mut recv): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
    let mut stray_closed = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while send.is_null() || recv.is_null() || !stray_closed {
        assert!(
            Instant::now() < deadline,
            "connected: {}, stray refused: {stray_closed}",
            !send.is_null() && !recv.is_null()
        );
        // SAFETY: valid handle buffer, comms and out-pointers.
        unsafe {
            if send.is_null() {
                ok(
                    NET.connect.unwrap()(dev, h.as_mut_ptr().cast(), &mut send, null_mut()),
                    "connect",
                );
            }
            let mut c = null_mut();
            ok(NET.accept.unwrap()(listen, &mut c, null_mut()), "accept");
            if !c.is_null() {
                assert!(
                    recv.is_null(),
                    "accept returned a second comm: the stray got in"
                );
                recv = c;
            }
        }
        if !stray_closed {
            // The listener drops the stray: its end sees EOF (or a reset).
            let mut b = [0u8; 64];
            stray_closed = match stray.read(&mut b) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
            };
        }
    }
    // The real pair works.
    let p = Pair { send, recv, listen };
    let mut sbuf = pattern(3, 4096);
    let mut rbuf = vec![0u8; 4096];
    let smh = reg_buf(p.send, &mut sbuf);
    let rmh = reg_buf(p.recv, &mut rbuf);
    transfer(
        &p,
        (sbuf.as_mut_ptr(), smh, 4096),
        (rbuf.as_mut_ptr(), rmh, 4096),
        1,
    );
    assert!(rbuf == sbuf);
    release(&p, smh, rmh);
}
