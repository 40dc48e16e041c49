//! The raw chains the typed pushes produce, checked field by field as a provider reads them.

use super::*;

const BASE: u64 = 0x10_0000;
const KEY: u32 = 0x77;
const REMOTE: RemoteAddr = RemoteAddr {
    addr: 0x5000,
    rkey: 0x99,
};

/// `len` bytes at `off` of a 4 KiB test region.
fn sge(off: usize, len: u32) -> Sge {
    Sge::within(BASE, 4096, KEY, off, len).expect("inside the test region")
}

fn plain() -> SendFlags {
    SendFlags::default()
}

/// The requests reachable from `head`, with their addresses, as the provider walks them.
fn walk(head: *mut ibv_send_wr) -> Vec<(*const ibv_send_wr, ibv_send_wr)> {
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p is the head or a `next` of a chain linked just before, not moved or changed
        // since; the test only reads.
        let wr = unsafe { *p };
        out.push((p.cast_const(), wr));
        p = wr.next;
    }
    out
}

/// The scatter entry a request points at, if any.
fn entry(wr: &ibv_send_wr) -> Option<ibv_sge> {
    // SAFETY: a non-null sg_list points into the chain linked just before (see `walk`).
    (!wr.sg_list.is_null()).then(|| unsafe { *wr.sg_list })
}

fn remote_of(wr: &ibv_send_wr) -> (u64, u32) {
    // SAFETY: every push writes the union's RDMA member.
    let r = unsafe { wr.wr.rdma };
    (r.remote_addr, r.rkey)
}

#[test]
fn a_chain_links_its_requests_in_order_and_the_last_next_is_null() {
    let mut chain = SendChain::new();
    for id in 1..=3 {
        chain.rdma_write(id, Some(sge(0, 8)), REMOTE, None, plain());
    }
    let head = chain.link(0);
    let wrs = walk(head);
    assert_eq!(
        wrs.iter().map(|(_, w)| w.wr_id).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    for ((at, _), slot) in wrs.iter().zip(chain.slots()) {
        assert_eq!(
            *at, &raw const slot.wr,
            "each link points at the chain's own request"
        );
    }
    assert!(wrs[2].1.next.is_null());
}

#[test]
fn an_empty_chain_links_to_nothing() {
    let mut chain = SendChain::new();
    assert!(chain.is_empty());
    assert!(chain.link(64).is_null());
}

#[test]
fn writes_carry_their_opcode_remote_and_scatter_entry() {
    let mut chain = SendChain::new();
    chain.rdma_write(1, Some(sge(16, 100)), REMOTE, None, plain());
    chain.rdma_write(
        2,
        Some(sge(0, 4)),
        RemoteAddr { addr: 7, rkey: 8 },
        Some(5),
        plain(),
    );
    let wrs = walk(chain.link(0));
    assert_eq!(wrs[0].1.opcode, IBV_WR_RDMA_WRITE);
    assert_eq!(wrs[1].1.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
    assert_eq!(remote_of(&wrs[0].1), (0x5000, 0x99));
    assert_eq!(remote_of(&wrs[1].1), (7, 8));
    let e = entry(&wrs[0].1).expect("a non-empty write has an entry");
    assert_eq!((e.addr, e.length, e.lkey), (BASE + 16, 100, KEY));
    assert_eq!(wrs[0].1.num_sge, 1);
    assert_eq!(
        wrs[0].1.sg_list.cast_const(),
        &raw const chain.slots()[0].sge
    );
}

#[test]
fn immediates_are_sent_in_network_byte_order() {
    let mut chain = SendChain::new();
    chain.rdma_write(1, None, REMOTE, Some(0x0102_0304), plain());
    chain.rdma_write(2, None, REMOTE, None, plain());
    let wrs = walk(chain.link(0));
    assert_eq!(wrs[0].1.imm_data.to_ne_bytes(), [1, 2, 3, 4]);
    assert_eq!(wrs[1].1.imm_data, 0);
}

#[test]
fn only_the_requests_asked_are_signaled() {
    let mut chain = SendChain::new();
    let signaled = SendFlags {
        signaled: true,
        inline: false,
    };
    chain.rdma_write(1, Some(sge(0, 8)), REMOTE, None, plain());
    chain.rdma_write(2, Some(sge(0, 8)), REMOTE, Some(1), signaled);
    chain.rdma_read(3, sge(0, 1), REMOTE, false);
    chain.rdma_read(4, sge(0, 1), REMOTE, true);
    let flags: Vec<u32> = walk(chain.link(0))
        .iter()
        .map(|(_, w)| w.send_flags)
        .collect();
    assert_eq!(flags, [0, IBV_SEND_SIGNALED, 0, IBV_SEND_SIGNALED]);
}

#[test]
fn inline_is_set_only_when_asked_and_the_payload_fits() {
    let asked = SendFlags {
        signaled: false,
        inline: true,
    };
    let mut chain = SendChain::new();
    chain.rdma_write(1, Some(sge(0, 64)), REMOTE, None, asked);
    chain.rdma_write(2, Some(sge(0, 65)), REMOTE, None, asked);
    chain.rdma_write(3, Some(sge(0, 8)), REMOTE, None, plain());
    chain.rdma_write(4, None, REMOTE, Some(9), asked);
    chain.rdma_write(5, Some(sge(0, 1)), REMOTE, Some(9), asked);
    let inline = |chain: &mut SendChain, room| -> Vec<bool> {
        walk(chain.link(room))
            .iter()
            .map(|(_, w)| w.send_flags & IBV_SEND_INLINE != 0)
            .collect()
    };
    assert_eq!(inline(&mut chain, 64), [true, false, false, false, true]);
    assert_eq!(
        inline(&mut chain, 0),
        [false; 5],
        "no room: no inline, even when a link before allowed it"
    );
    assert_eq!(inline(&mut chain, 65), [true, true, false, false, true]);
}

#[test]
fn a_write_of_no_bytes_has_no_scatter_entry() {
    let mut chain = SendChain::new();
    chain.rdma_write(1, None, REMOTE, Some(1), plain());
    chain.rdma_write(2, Some(sge(8, 0)), REMOTE, Some(1), plain());
    for (_, wr) in walk(chain.link(64)) {
        assert_eq!(wr.num_sge, 0);
        assert!(wr.sg_list.is_null());
    }
}

#[test]
fn a_read_lands_in_its_local_entry_and_is_never_inline() {
    let mut chain = SendChain::<Fixed<1>>::fixed();
    chain.rdma_read(42, sge(0, 1), RemoteAddr { addr: 3, rkey: 4 }, true);
    let wrs = walk(chain.link(4096));
    assert_eq!(wrs.len(), 1);
    let wr = wrs[0].1;
    assert_eq!((wr.wr_id, wr.opcode, wr.num_sge), (42, IBV_WR_RDMA_READ, 1));
    assert_eq!(wr.send_flags, IBV_SEND_SIGNALED);
    assert_eq!(remote_of(&wr), (3, 4));
    let e = entry(&wr).expect("a read has its landing entry");
    assert_eq!((e.addr, e.length, e.lkey), (BASE, 1, KEY));
}

#[test]
fn a_chain_reused_after_clear_has_no_stale_links() {
    let mut chain = SendChain::new();
    for id in 0..3 {
        chain.rdma_write(id, Some(sge(0, 8)), REMOTE, None, plain());
    }
    assert_eq!(walk(chain.link(0)).len(), 3);
    chain.clear();
    assert!(chain.is_empty());
    chain.rdma_write(7, None, REMOTE, Some(1), plain());
    let wrs = walk(chain.link(0));
    assert_eq!(wrs.len(), 1, "the old second request is not reachable");
    assert_eq!(wrs[0].1.wr_id, 7);
    assert!(wrs[0].1.next.is_null());
    assert!(
        wrs[0].1.sg_list.is_null(),
        "no entry left from the old first request"
    );
}

#[test]
fn a_reused_chain_does_not_allocate_again() {
    let mut chain = SendChain::new();
    for id in 0..8 {
        chain.rdma_write(id, Some(sge(0, 8)), REMOTE, None, plain());
    }
    let storage = chain.slots().as_ptr();
    for _ in 0..3 {
        chain.clear();
        for id in 0..8 {
            chain.rdma_write(id, Some(sge(0, 8)), REMOTE, None, plain());
        }
        assert_eq!(chain.slots().as_ptr(), storage);
    }
}

#[test]
fn a_chain_moved_into_a_vec_links_to_its_new_place() {
    let mut chain = SendChain::<Fixed<2>>::fixed();
    chain.rdma_write(1, Some(sge(0, 8)), REMOTE, None, plain());
    chain.rdma_write(2, Some(sge(8, 8)), REMOTE, Some(3), plain());
    let before = chain.link(0);
    let mut moved = Vec::new();
    moved.push(chain);
    for _ in 0..16 {
        // Growing the Vec moves the chain again.
        moved.push(SendChain::fixed());
    }
    let chain = &mut moved[0];
    let head = chain.link(0);
    assert_ne!(head, before, "the chain did move");
    let wrs = walk(head);
    assert_eq!(wrs.len(), 2);
    for ((at, wr), slot) in wrs.iter().zip(chain.slots()) {
        assert_eq!(*at, &raw const slot.wr);
        assert_eq!(wr.sg_list.cast_const(), &raw const slot.sge);
    }
    assert_eq!(entry(&wrs[1].1).map(|e| e.addr), Some(BASE + 8));
}

#[test]
fn a_chain_sent_to_another_thread_links_there() {
    let mut chain = SendChain::new();
    chain.rdma_write(1, Some(sge(0, 8)), REMOTE, None, plain());
    chain.rdma_write(2, None, REMOTE, Some(3), plain());
    let ids = std::thread::spawn(move || {
        let wrs = walk(chain.link(0));
        wrs.iter().map(|(_, w)| w.wr_id).collect::<Vec<_>>()
    })
    .join()
    .expect("the thread finishes");
    assert_eq!(ids, [1, 2]);
}

#[test]
#[should_panic(expected = "at most 2 work requests")]
fn a_full_fixed_chain_refuses_another_request() {
    let mut chain = SendChain::<Fixed<2>>::fixed();
    for id in 0..3 {
        chain.rdma_write(id, None, REMOTE, None, plain());
    }
}

#[test]
fn an_entry_outside_its_region_is_refused() {
    assert_eq!(sge(4090, 6).addr(), BASE + 4090);
    assert_eq!(Sge::within(BASE, 4096, KEY, 4090, 7), None);
    assert_eq!(Sge::within(BASE, 4096, KEY, 4097, 0), None);
    assert_eq!(Sge::within(BASE, 4096, KEY, usize::MAX, 2), None);
    assert_eq!(Sge::within(u64::MAX, 4096, KEY, 1, 1), None);
    let s = sge(4096, 0);
    assert!(s.is_empty());
    assert_eq!((s.lkey(), s.len()), (KEY, 0));
}

#[test]
fn an_empty_receive_has_no_scatter_entry() {
    let wr = empty_recv(9);
    assert_eq!((wr.wr_id, wr.num_sge), (9, 0));
    assert!(wr.sg_list.is_null());
    assert!(wr.next.is_null());
}

/// The fields a provider reads of one request (pointers aside), for comparing two builds.
fn fields(wr: &ibv_send_wr) -> String {
    format!(
        "id {} sges {} op {} flags {:#x} imm {:#x} remote {:?} entry {:?}",
        wr.wr_id,
        wr.num_sge,
        wr.opcode,
        wr.send_flags,
        wr.imm_data,
        remote_of(wr),
        entry(wr).map(|e| (e.addr, e.length, e.lkey)),
    )
}

#[test]
fn a_lone_write_is_the_same_request_as_a_chain_of_that_one_write() {
    let inline = SendFlags {
        signaled: true,
        inline: true,
    };
    let cases = [
        (Some(sge(0, 8)), Some(8), inline, 64),
        (Some(sge(0, 8)), Some(8), inline, 4),
        (Some(sge(16, 100)), None, plain(), 0),
        (None, Some(5), inline, 64),
        (Some(sge(0, 0)), Some(0), inline, 64),
    ];
    for (local, imm, flags, room) in cases {
        let mut chain = SendChain::<Fixed<1>>::fixed();
        chain.rdma_write(7, local, REMOTE, imm, flags);
        let from_chain = walk(chain.link(room));
        // Read inside the call, while the request and its entry are alive.
        let alone = with_lone_write(7, local, REMOTE, imm, flags, room, |wr| {
            let alone = walk(wr);
            assert_eq!(alone.len(), 1);
            assert!(alone[0].1.next.is_null());
            fields(&alone[0].1)
        });
        assert_eq!(alone, fields(&from_chain[0].1));
    }
}
