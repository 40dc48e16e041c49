//! Network events for NCCL's profiler (ABI v10+): one event per (buffer × QP work that carries
//! it), as NCCL's own IB transport emits them, and the bookkeeping that gives every Start exactly
//! one Stop.
//!
//! When NCCL passes a profiler callback to `init`, every buffer that `isend`/`irecv` got a
//! profiler handle for (`phandle`, `phandles[i]`; NULL: no events) is described by an
//! `ncclProfilerNetIbDescr_v1_t` per QP:
//! - a send buffer, when its group's writes are posted: that may be during a later `isend` than
//!   its own (a send that only matched a buffer of a receive group waits for the other sends of
//!   the group). One event per QP the group uses: the index of the physical device the QP is
//!   on, the writes' `wr_id`, opcode `RDMA_WRITE_WITH_IMM` (a group of one buffer) or `RDMA_WRITE` (a buffer of a larger group,
//!   whose write with immediate carries the sizes), that QP's number, and the bytes of the buffer
//!   that QP carries ([`ferro_proto::plan::buffer_shares`]: the whole buffer unsplit; its chunk,
//!   possibly empty, in split mode). The lengths of a buffer's events add up to its size;
//! - a receive buffer, when the group's zero-length receives are posted: one event per QP a
//!   receive is posted on, opcode receive (`IBV_WC_RECV`), the receive's `wr_id`, the part of the
//!   buffer's posted size that QP's share stands for.
//!
//! An event stops when the signaled completion of its QP for its group is polled (a send
//! group's write with immediate on that QP, or the receive's immediate), recognised by the
//! completion's `wr_id` (`ferro_proto::comm::wr_id`) and QP number. Events still open stop when
//! `test` reports the request done or when the comm closes. A profiler handle is only used by
//! Start, while its request is outstanding; nothing refers to it afterwards (NCCL reuses the
//! slot). `iflush` and the clear-to-send writes have no events, as in NCCL's transport.
//!
//! Owns: the callback; [`Phandles`], the handles of one `irecv`, which the shim passes to the
//! transport's call (NCCL's array, not copied) and the transport hands to the hooks (an
//! `isend`'s one handle goes as NCCL's pointer); and each comm's
//! [`CommEvents`]: the open event handles per (request, buffer, QP), the handles of matched sends
//! whose group is not yet posted, and the requests of each posted send group. The transport only
//! calls one hook per place ([`on_send_matched`], [`on_send_posted`], [`on_recv_posted`],
//! [`on_completion`], [`on_done`]) with its comm as an [`EventSource`]; this module never names
//! the transport. Closing a comm drops its [`CommEvents`], which stops what is still open.
//!
//! Cost: without a callback every hook returns after one relaxed atomic load and nothing is
//! allocated. With one, a comm's bookkeeping is allocated once, at its first event (fixed
//! tables: 256 requests × QPs slots), so messages allocate nothing either. The bookkeeping has
//! its own lock: the posting and completion hooks take it inside the comm's lock, `test`'s after
//! it, and nothing takes the comm's lock while holding it. NCCL drives a comm from one thread, so
//! no other call reuses a request between `test` reporting it done and its events being closed.

use core::ffi::c_void;
use ferro_ffi::{
    NCCL_PROFILE_QP, NCCL_PROFILER_NET_IB_VER, NCCL_PROFILER_NET_TYPE_IB, ncclProfilerCallback_t,
    ncclProfilerNetIbDescr_v1_t, ncclProfilerNetIbQp_v1_t, profiler_event,
};
use ferro_proto::comm::recv::{PostRecv, RECV_REQS, RecvBuf};
use ferro_proto::comm::send::{ReadyGroup, SEND_REQS};
use ferro_proto::comm::wr_id::WrId;
use ferro_proto::plan::{QpLayout, SendItem, buffer_shares};
use ferro_proto::{MAX_RECVS, SLOTS};
use ferro_verbs::sys::{IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, ibv_wc};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The descriptor's opcode for a receive (`IBV_WC_RECV`).
const OPCODE_RECV: i32 = 128;

type Callback = unsafe extern "C" fn(
    *mut *mut c_void,
    i32,
    *mut c_void,
    i64,
    *mut c_void,
) -> ferro_ffi::ncclResult_t;

/// NCCL's callback as a pointer (NULL: none given, no events).
static CALLBACK: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// The callback, after one relaxed load (the only cost of every hook without one).
#[inline]
fn callback() -> Option<Callback> {
    let p = CALLBACK.load(Ordering::Relaxed);
    if p.is_null() {
        return None;
    }
    // SAFETY: the only non-NULL values stored are `Callback` function pointers (set_callback),
    // and function and data pointers have the same size on every target the plugin builds for.
    Some(unsafe { core::mem::transmute::<*mut (), Callback>(p) })
}

/// Records the callback NCCL passed to `init` (NULL: no events). The last one given wins: NCCL
/// passes the same function every time.
pub fn set_callback(cb: ncclProfilerCallback_t) {
    if let Some(cb) = cb {
        CALLBACK.store(cb as *mut (), Ordering::Release);
    }
}

fn plugin_id() -> i64 {
    NCCL_PROFILER_NET_TYPE_IB | NCCL_PROFILER_NET_IB_VER
}

/// The profiler handles NCCL passed with one `irecv` (one per buffer), carried from the shim to
/// the transport's hooks as NCCL's array itself (valid for the call); NULL entries are "no
/// handle". (An `isend`'s one handle travels as the pointer NCCL passed: the hooks look at it
/// only when a callback is set.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Phandles<'a>(&'a [*mut c_void]);

impl<'a> Phandles<'a> {
    /// No handles (before v10, or NCCL passed none).
    pub const NONE: Phandles<'static> = Phandles(&[]);

    /// The handles NCCL passed (anything past `MAX_RECVS` is ignored). Without a callback
    /// nothing is kept: no event will be started. Nothing is copied.
    #[inline]
    pub fn of(phandles: &'a [*mut c_void]) -> Phandles<'a> {
        if callback().is_some() {
            Phandles(phandles)
        } else {
            Phandles(&[])
        }
    }

    fn any(&self) -> bool {
        self.0.iter().take(MAX_RECVS).any(|p| !p.is_null())
    }

    /// The handles as the event book keeps them (0: none), at most `MAX_RECVS`.
    fn values(&self) -> [usize; MAX_RECVS] {
        let mut a = [0usize; MAX_RECVS];
        for (slot, p) in a.iter_mut().zip(self.0) {
            *slot = *p as usize;
        }
        a
    }
}

/// What the profiler needs to know of a comm. The transport implements it for its comms, so
/// this module knows nothing of them: the transport calls the hooks, never the other way round.
pub trait EventSource {
    /// The comm's event bookkeeping.
    fn events(&self) -> &CommEvents;
    /// The NCCL device index of each member device the comm's QPs are on.
    fn member_devices(&self) -> Vec<i32>;
    /// The comm's data QP numbers, by QP index.
    fn qp_numbers(&self) -> Vec<u32>;
    /// How the comm's QPs map onto the member devices.
    fn layout(&self) -> QpLayout;
}

/// Where Starts and Stops go: NCCL's callback, or a recording fake in the unit tests.
trait Sink {
    /// Starts an event for `phandle`; the profiler's event handle, 0 when it made none.
    fn start(&mut self, phandle: usize, descr: &mut ncclProfilerNetIbDescr_v1_t) -> usize;
    fn stop(&mut self, event: usize);
}

struct Nccl(Callback);

impl Sink for Nccl {
    fn start(&mut self, phandle: usize, descr: &mut ncclProfilerNetIbDescr_v1_t) -> usize {
        let mut e: *mut c_void = core::ptr::null_mut();
        // SAFETY: NCCL's callback with a valid event-handle out-pointer (pre-set to NULL, as a
        // Start without a listening profiler leaves it untouched), the phandle NCCL gave for this
        // buffer (its request is outstanding), and a descriptor that lives for the call.
        let _ = unsafe {
            (self.0)(
                &mut e,
                profiler_event::START,
                phandle as *mut c_void,
                plugin_id(),
                (descr as *mut ncclProfilerNetIbDescr_v1_t).cast(),
            )
        };
        e as usize
    }

    fn stop(&mut self, event: usize) {
        let mut e = event as *mut c_void;
        // SAFETY: an event handle the profiler set at Start and has not seen stopped (the book
        // forgets it here).
        let _ = unsafe {
            (self.0)(
                &mut e,
                profiler_event::STOP,
                core::ptr::null_mut(),
                plugin_id(),
                core::ptr::null_mut(),
            )
        };
    }
}

/// What a send group was, by FIFO slot: its sequence number + 1 (0: none) and its requests.
#[derive(Debug, Clone, Copy, Default)]
struct GroupRec {
    seq1: u64,
    n: usize,
    reqs: [u32; MAX_RECVS],
}

/// One comm's events: fixed tables, sized at the first event.
#[derive(Debug)]
struct Book {
    /// The physical device index of each member of the comm's device, by member.
    devices: Vec<i32>,
    /// The comm's QP numbers, by QP index.
    qpns: Vec<u32>,
    layout: QpLayout,
    /// Buffers per request: 1 (send) or [`MAX_RECVS`] (receive).
    bufs: usize,
    /// Open event handles by (request, buffer, QP index); 0: none.
    events: Vec<usize>,
    /// Send: the profiler handle of a matched send whose group is not posted yet, by request.
    pending: Vec<usize>,
    /// Send: the requests of the last group posted in each FIFO slot.
    groups: [GroupRec; SLOTS],
}

impl Book {
    fn new(send: bool, devices: Vec<i32>, qpns: Vec<u32>, layout: QpLayout) -> Book {
        let (reqs, bufs) = if send {
            (SEND_REQS, 1)
        } else {
            (RECV_REQS, MAX_RECVS)
        };
        let nqps = qpns.len().max(1);
        Book {
            devices,
            qpns,
            layout,
            bufs,
            events: vec![0; reqs * bufs * nqps],
            pending: vec![0; if send { reqs } else { 0 }],
            groups: [GroupRec::default(); SLOTS],
        }
    }

    fn nqps(&self) -> usize {
        self.qpns.len().max(1)
    }

    fn index(&self, req: u32, buf: usize, qp: usize) -> Option<usize> {
        let i = (req as usize * self.bufs + buf) * self.nqps() + qp;
        (buf < self.bufs && qp < self.nqps() && i < self.events.len()).then_some(i)
    }

    /// Stops the event in slot `i`, if one is open (and forgets it: never stopped twice).
    fn stop_at(&mut self, sink: &mut impl Sink, i: usize) {
        let e = core::mem::take(&mut self.events[i]);
        if e != 0 {
            sink.stop(e);
        }
    }

    /// Starts one event per QP share of a buffer of group `seq`.
    #[allow(clippy::too_many_arguments)]
    fn start_buffer(
        &mut self,
        sink: &mut impl Sink,
        phandle: usize,
        req: u32,
        buf: usize,
        seq: u64,
        size: u32,
        wr_id: u64,
        opcode: i32,
    ) {
        let layout = self.layout;
        for (qp, len) in buffer_shares(seq, size, &layout) {
            let Some(i) = self.index(req, buf, qp) else {
                continue;
            };
            self.stop_at(sink, i);
            let mut d = ncclProfilerNetIbDescr_v1_t {
                type_: NCCL_PROFILE_QP,
                qp: ncclProfilerNetIbQp_v1_t {
                    device: self
                        .devices
                        .get(self.layout.local_dev(qp))
                        .copied()
                        .unwrap_or(-1),
                    wr_id,
                    opcode,
                    qpNum: self.qpns.get(qp).copied().unwrap_or(0) as i32,
                    length: len as usize,
                },
            };
            self.events[i] = sink.start(phandle, &mut d);
        }
    }

    /// A send matched a buffer; its group is posted later (by this or a later `isend`).
    fn send_matched(&mut self, req: u32, phandle: usize) {
        if let Some(p) = self.pending.get_mut(req as usize) {
            *p = phandle;
        }
    }

    /// Group `seq`'s writes were posted: the events of each of its sends that has a handle.
    fn send_posted(&mut self, sink: &mut impl Sink, seq: u64, items: &[SendItem], reqs: &[u32]) {
        let n = reqs.len().min(MAX_RECVS);
        let mut rec = GroupRec {
            seq1: seq + 1,
            n,
            reqs: [0; MAX_RECVS],
        };
        rec.reqs[..n].copy_from_slice(&reqs[..n]);
        self.groups[(seq % SLOTS as u64) as usize] = rec;
        let wr_id = WrId::Send { seq }.encode();
        let opcode = if n == 1 {
            IBV_WR_RDMA_WRITE_WITH_IMM
        } else {
            IBV_WR_RDMA_WRITE
        } as i32;
        for (&req, it) in reqs.iter().zip(items) {
            let ph = self
                .pending
                .get_mut(req as usize)
                .map_or(0, core::mem::take);
            if ph != 0 {
                self.start_buffer(sink, ph, req, 0, seq, it.size, wr_id, opcode);
            }
        }
    }

    /// Receive group `seq` (request `req`) posted its receives: the events of each buffer with a
    /// handle (`sizes[i]` posted bytes, `phandles[i]`).
    fn recv_posted(
        &mut self,
        sink: &mut impl Sink,
        req: u32,
        seq: u64,
        sizes: &[u32],
        phandles: &[usize],
    ) {
        let wr_id = WrId::Recv { req }.encode();
        for (b, (&size, &ph)) in sizes.iter().zip(phandles).enumerate() {
            if ph != 0 {
                self.start_buffer(sink, ph, req, b, seq, size, wr_id, OPCODE_RECV);
            }
        }
    }

    /// A successful completion on QP `qpn`: the events its work stands for stop.
    fn completion(&mut self, sink: &mut impl Sink, wr_id: u64, qpn: u32) {
        let Some(qp) = self.qpns.iter().position(|&q| q == qpn) else {
            return;
        };
        match WrId::decode(wr_id) {
            WrId::Send { seq } => {
                let rec = self.groups[(seq % SLOTS as u64) as usize];
                if rec.seq1 != seq + 1 {
                    return;
                }
                for &req in &rec.reqs[..rec.n] {
                    if let Some(i) = self.index(req, 0, qp) {
                        self.stop_at(sink, i);
                    }
                }
            }
            WrId::Recv { req } => {
                for b in 0..self.bufs {
                    if let Some(i) = self.index(req, b, qp) {
                        self.stop_at(sink, i);
                    }
                }
            }
            WrId::Cts { .. } | WrId::Flush { .. } => {}
        }
    }

    /// `test` reported `req` done: whatever of it is still open stops, and it is forgotten.
    fn done(&mut self, sink: &mut impl Sink, req: u32) {
        if let Some(p) = self.pending.get_mut(req as usize) {
            *p = 0;
        }
        for b in 0..self.bufs {
            for qp in 0..self.nqps() {
                if let Some(i) = self.index(req, b, qp) {
                    self.stop_at(sink, i);
                }
            }
        }
    }

    /// The comm closes: every open event stops.
    fn close(&mut self, sink: &mut impl Sink) {
        for i in 0..self.events.len() {
            self.stop_at(sink, i);
        }
        self.pending.iter_mut().for_each(|p| *p = 0);
    }
}

/// A comm's profiler events (empty until its first event). Dropped with the comm: the events
/// still open stop then.
#[derive(Debug, Default)]
pub struct CommEvents(OnceLock<Mutex<Book>>);

impl CommEvents {
    /// The comm's book, if it has one.
    fn get(&self) -> Option<MutexGuard<'_, Book>> {
        self.0
            .get()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The comm's book, made on first use.
    fn get_or_make(&self, make: impl FnOnce() -> Book) -> MutexGuard<'_, Book> {
        self.0
            .get_or_init(|| Mutex::new(make()))
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for CommEvents {
    fn drop(&mut self) {
        if let (Some(cb), Some(m)) = (callback(), self.0.get_mut()) {
            m.get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .close(&mut Nccl(cb));
        }
    }
}

fn book_of(comm: &impl EventSource, send: bool) -> MutexGuard<'_, Book> {
    comm.events().get_or_make(|| {
        Book::new(
            send,
            comm.member_devices(),
            comm.qp_numbers(),
            comm.layout(),
        )
    })
}

/// `isend` matched send request `req` to a buffer of a group that is not complete yet. `ph`
/// is the profiler handle NCCL passed with it (NULL: none).
#[inline]
pub fn on_send_matched(comm: &impl EventSource, req: u32, ph: *mut c_void) {
    if callback().is_none() {
        return;
    }
    let ph = ph as usize;
    if ph != 0 {
        book_of(comm, true).send_matched(req, ph);
    }
}

/// `isend` of send request `req` completed the group `group` gives (asked for only when a
/// profiler is attached), whose writes were posted. `ph` is the profiler handle NCCL passed
/// with it (NULL: none).
#[inline]
pub fn on_send_posted<'a>(
    comm: &impl EventSource,
    req: u32,
    ph: *mut c_void,
    group: impl FnOnce() -> ReadyGroup<'a>,
) {
    if let Some(cb) = callback() {
        send_posted(comm, req, ph as usize, &group(), cb);
    }
}

/// [`on_send_posted`] with a callback: out of line, so a post without one pays only the load.
#[inline(never)]
fn send_posted(comm: &impl EventSource, req: u32, ph: usize, group: &ReadyGroup<'_>, cb: Callback) {
    let mut book = if ph != 0 {
        book_of(comm, true)
    } else {
        match comm.events().get() {
            Some(b) => b,
            None => return,
        }
    };
    book.send_matched(req, ph);
    book.send_posted(&mut Nccl(cb), group.seq, group.items(), group.reqs());
}

/// `irecv` posted the receives of `post`. Without a callback (or without handles) the handles
/// are empty ([`Phandles::of`]): one compare, and the events are left out of line.
#[inline(always)]
pub fn on_recv_posted(
    comm: &impl EventSource,
    post: &PostRecv,
    bufs: &[RecvBuf],
    ph: Phandles<'_>,
) {
    if !ph.0.is_empty() {
        recv_posted(comm, post, bufs, ph);
    }
}

#[inline(never)]
fn recv_posted(comm: &impl EventSource, post: &PostRecv, bufs: &[RecvBuf], ph: Phandles<'_>) {
    let Some(cb) = callback() else {
        return;
    };
    if !ph.any() {
        return;
    }
    let ph = ph.values();
    let mut sizes = [0u32; MAX_RECVS];
    for (s, b) in sizes.iter_mut().zip(bufs) {
        *s = b.size;
    }
    let n = bufs.len();
    book_of(comm, false).recv_posted(&mut Nccl(cb), post.req, post.seq, &sizes[..n], &ph[..n]);
}

/// A successful completion was polled from the comm's CQ. Only the callback's check is
/// inlined (into the poll of `test`): the book's work is out of line, so a plugin without a
/// profiler carries none of it in its hot loop.
#[inline]
pub fn on_completion(comm: &impl EventSource, wc: &ibv_wc) {
    if let Some(cb) = callback() {
        completion_with(comm, cb, wc);
    }
}

#[inline(never)]
fn completion_with(comm: &impl EventSource, cb: Callback, wc: &ibv_wc) {
    if let Some(mut b) = comm.events().get() {
        b.completion(&mut Nccl(cb), wc.wr_id, wc.qp_num);
    }
}

/// `test` reported request `req` of `comm` done (the book's work out of line, as for
/// [`on_completion`]).
#[inline]
pub fn on_done(comm: &impl EventSource, req: u32) {
    if let Some(cb) = callback() {
        done_with(comm, cb, req);
    }
}

#[inline(never)]
fn done_with(comm: &impl EventSource, cb: Callback, req: u32) {
    if let Some(mut b) = comm.events().get() {
        b.done(&mut Nccl(cb), req);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records every Start (with its descriptor) and Stop; hands out handles 1, 2, 3 …, or none
    /// for phandles listed in `silent` (a profiler that does not listen to that step).
    #[derive(Default)]
    struct Fake {
        started: Vec<(usize, usize, ncclProfilerNetIbDescr_v1_t)>,
        stopped: Vec<usize>,
        silent: Vec<usize>,
    }

    impl Sink for Fake {
        fn start(&mut self, phandle: usize, d: &mut ncclProfilerNetIbDescr_v1_t) -> usize {
            if self.silent.contains(&phandle) {
                return 0;
            }
            let h = self.started.len() + 1;
            self.started.push((h, phandle, *d));
            h
        }

        fn stop(&mut self, event: usize) {
            assert!(
                !self.stopped.contains(&event),
                "event {event} stopped twice"
            );
            assert!(
                self.started.iter().any(|s| s.0 == event),
                "stop of an event never started: {event}"
            );
            self.stopped.push(event);
        }
    }

    impl Fake {
        fn open(&self) -> Vec<usize> {
            self.started
                .iter()
                .map(|s| s.0)
                .filter(|h| !self.stopped.contains(h))
                .collect()
        }

        fn of(&self, phandle: usize) -> Vec<ncclProfilerNetIbDescr_v1_t> {
            self.started
                .iter()
                .filter(|s| s.1 == phandle)
                .map(|s| s.2)
                .collect()
        }
    }

    const QPNS: [u32; 2] = [0x11, 0x12];

    fn item(size: u32) -> SendItem {
        SendItem {
            addr: 0x1000,
            lkeys: [1; ferro_proto::MAX_DEVS],
            size,
            remote_addr: 0x2000,
            rkeys: [2; ferro_proto::MAX_DEVS],
        }
    }

    #[test]
    fn a_split_send_buffer_has_one_event_per_qp_whose_lengths_add_up_to_its_size() {
        let mut b = Book::new(
            true,
            vec![3],
            QPNS.to_vec(),
            QpLayout::one_device(QPNS.len(), true),
        );
        let mut f = Fake::default();
        b.send_matched(7, 0xa0);
        b.send_posted(&mut f, 4, &[item(1000)], &[7]);
        let d = f.of(0xa0);
        assert_eq!(d.len(), 2);
        let qps: Vec<i32> = d.iter().map(|d| d.qp.qpNum).collect();
        assert_eq!(qps, vec![0x11, 0x12]);
        assert_eq!(d.iter().map(|d| d.qp.length).sum::<usize>(), 1000);
        assert_eq!((d[0].qp.length, d[1].qp.length), (512, 488));
        for d in &d {
            assert_eq!(d.type_, NCCL_PROFILE_QP);
            assert_eq!(d.qp.device, 3);
            assert_eq!(d.qp.opcode, IBV_WR_RDMA_WRITE_WITH_IMM as i32);
            assert_eq!(d.qp.wr_id, WrId::Send { seq: 4 }.encode());
        }
        // Each QP's signaled completion stops that QP's event only.
        b.completion(&mut f, WrId::Send { seq: 4 }.encode(), 0x12);
        assert_eq!(f.stopped, vec![2]);
        b.completion(&mut f, WrId::Send { seq: 4 }.encode(), 0x11);
        assert_eq!(f.stopped, vec![2, 1]);
        b.done(&mut f, 7);
        b.close(&mut f);
        assert_eq!(f.stopped.len(), 2, "nothing is stopped twice");
    }

    #[test]
    fn over_a_virtual_nic_each_event_names_the_member_device_its_qp_is_on() {
        let lay = QpLayout::new(1, false, 2, 2);
        let mut b = Book::new(true, vec![4, 7], QPNS.to_vec(), lay);
        let mut f = Fake::default();
        b.send_matched(3, 0xb0);
        b.send_posted(&mut f, 9, &[item(1000)], &[3]);
        let d = f.of(0xb0);
        let seen: Vec<(i32, i32)> = d.iter().map(|d| (d.qp.device, d.qp.qpNum)).collect();
        assert_eq!(
            seen,
            vec![(4, 0x11), (7, 0x12)],
            "one event per member's QP"
        );
        assert_eq!(d.iter().map(|d| d.qp.length).sum::<usize>(), 1000);
    }

    #[test]
    fn a_matched_send_starts_nothing_until_its_group_is_posted_by_another_send() {
        let mut b = Book::new(
            true,
            vec![0],
            QPNS.to_vec(),
            QpLayout::one_device(QPNS.len(), false),
        );
        let mut f = Fake::default();
        b.send_matched(1, 0xa1);
        assert!(f.started.is_empty());
        b.send_matched(2, 0xa2);
        b.send_posted(&mut f, 5, &[item(100), item(0)], &[1, 2]);
        assert_eq!(f.started.len(), 2, "one event per buffer (one QP, unsplit)");
        for (ph, len) in [(0xa1, 100), (0xa2, 0)] {
            let d = f.of(ph);
            assert_eq!(d.len(), 1);
            assert_eq!(d[0].qp.length, len);
            assert_eq!(d[0].qp.qpNum, 0x12, "group 5 of 2 unsplit QPs is on QP 1");
            assert_eq!(
                d[0].qp.opcode, IBV_WR_RDMA_WRITE as i32,
                "a buffer of a larger group is a plain write"
            );
        }
        b.completion(&mut f, WrId::Send { seq: 5 }.encode(), 0x12);
        assert!(f.open().is_empty());
    }

    #[test]
    fn sends_and_receives_without_a_profiler_handle_start_nothing() {
        let mut b = Book::new(
            true,
            vec![0],
            QPNS.to_vec(),
            QpLayout::one_device(QPNS.len(), true),
        );
        let mut f = Fake::default();
        b.send_matched(1, 0);
        b.send_posted(&mut f, 0, &[item(4096)], &[1]);
        let mut r = Book::new(
            false,
            vec![0],
            QPNS.to_vec(),
            QpLayout::one_device(QPNS.len(), true),
        );
        r.recv_posted(&mut f, 0, 0, &[4096, 4096], &[0, 0]);
        assert!(f.started.is_empty());
    }

    #[test]
    fn a_completion_for_another_group_of_the_same_slot_stops_nothing() {
        let mut b = Book::new(true, vec![0], vec![0x11], QpLayout::one_device(1, false));
        let mut f = Fake::default();
        b.send_matched(1, 0xa1);
        b.send_posted(&mut f, 3, &[item(8)], &[1]);
        b.completion(
            &mut f,
            WrId::Send {
                seq: 3 + SLOTS as u64,
            }
            .encode(),
            0x11,
        );
        b.completion(&mut f, WrId::Cts { seq: 3 }.encode(), 0x11);
        b.completion(&mut f, WrId::Send { seq: 3 }.encode(), 0x99);
        assert!(f.stopped.is_empty());
        b.completion(&mut f, WrId::Send { seq: 3 }.encode(), 0x11);
        assert_eq!(f.stopped, vec![1]);
    }

    #[test]
    fn receive_events_are_per_buffer_and_qp_and_stop_with_that_qps_receive() {
        let mut b = Book::new(
            false,
            vec![1],
            QPNS.to_vec(),
            QpLayout::one_device(QPNS.len(), true),
        );
        let mut f = Fake::default();
        b.recv_posted(&mut f, 9, 2, &[65536, 300], &[0xb0, 0xb1]);
        assert_eq!(f.started.len(), 4);
        let lens = |ph| f.of(ph).iter().map(|d| d.qp.length).collect::<Vec<_>>();
        assert_eq!(lens(0xb0), vec![32768, 32768]);
        assert_eq!(lens(0xb1), vec![256, 44]);
        for (_, _, d) in &f.started {
            assert_eq!(d.qp.opcode, OPCODE_RECV);
            assert_eq!(d.qp.wr_id, WrId::Recv { req: 9 }.encode());
        }
        b.completion(&mut f, WrId::Recv { req: 9 }.encode(), 0x11);
        let on_qp0: Vec<usize> = f
            .started
            .iter()
            .filter(|s| s.2.qp.qpNum == 0x11)
            .map(|s| s.0)
            .collect();
        assert_eq!(f.stopped, on_qp0, "both buffers' events on that QP");
        b.completion(&mut f, WrId::Recv { req: 8 }.encode(), 0x12);
        assert_eq!(
            f.stopped.len(),
            2,
            "another request's receive stops nothing"
        );
        b.done(&mut f, 9);
        assert!(f.open().is_empty(), "done stops what is still open");
    }

    #[test]
    fn done_and_close_stop_each_open_event_exactly_once_and_forget_pending_handles() {
        let mut b = Book::new(
            true,
            vec![0],
            QPNS.to_vec(),
            QpLayout::one_device(QPNS.len(), true),
        );
        let mut f = Fake::default();
        b.send_matched(1, 0xa1);
        b.send_posted(&mut f, 0, &[item(4096)], &[1]);
        b.send_matched(2, 0xa2);
        b.send_posted(&mut f, 1, &[item(4096)], &[2]);
        b.send_matched(3, 0xa3);
        b.done(&mut f, 1);
        assert_eq!(f.stopped, vec![1, 2]);
        b.close(&mut f);
        assert_eq!(f.stopped, vec![1, 2, 3, 4]);
        // The matched send's handle is gone: a later group with its request starts nothing.
        b.send_posted(&mut f, 2, &[item(64)], &[3]);
        assert_eq!(f.started.len(), 4);
        b.close(&mut f);
        assert_eq!(f.stopped.len(), 4);
    }

    #[test]
    fn an_event_the_profiler_did_not_create_is_never_stopped() {
        let mut b = Book::new(false, vec![0], vec![0x11], QpLayout::one_device(1, false));
        let mut f = Fake {
            silent: vec![0xc0],
            ..Fake::default()
        };
        b.recv_posted(&mut f, 0, 0, &[64, 64], &[0xc0, 0xc1]);
        assert_eq!(f.started.len(), 1);
        b.completion(&mut f, WrId::Recv { req: 0 }.encode(), 0x11);
        b.close(&mut f);
        assert_eq!(f.stopped, vec![1]);
    }

    #[test]
    fn a_request_index_is_reused_cleanly_after_done() {
        let mut b = Book::new(true, vec![0], vec![0x11], QpLayout::one_device(1, false));
        let mut f = Fake::default();
        for seq in 0..(2 * SLOTS as u64) {
            b.send_matched(5, 0xa0 + seq as usize);
            b.send_posted(&mut f, seq, &[item(8)], &[5]);
            b.completion(&mut f, WrId::Send { seq }.encode(), 0x11);
            b.done(&mut f, 5);
        }
        assert_eq!(f.started.len(), 2 * SLOTS);
        assert!(f.open().is_empty());
        let phandles: Vec<usize> = f.started.iter().map(|s| s.1).collect();
        let want: Vec<usize> = (0..2 * SLOTS).map(|s| 0xa0 + s).collect();
        assert_eq!(phandles, want, "each Start with its own send's handle");
    }

    #[test]
    fn without_a_callback_no_profiler_handle_is_kept() {
        // No callback is set in unit tests: the handles are never stored.
        assert_eq!(Phandles::of(&[0x55 as *mut c_void]), Phandles::NONE);
        assert!(!Phandles::of(&[0x55 as *mut c_void; MAX_RECVS + 1]).any());
    }
}
