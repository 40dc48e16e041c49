//! The cuts and the recovery exchange of the fake wire: what a cut destroys, which side
//! notices, and how each side answers the other's messages.

use super::{Cut, Notice, Wire};
use ferro_proto::comm::recovering::Recovering;
use ferro_proto::recovery::{RecoveryError, Step};
use ferro_proto::wire::{self, Msg};
use std::collections::VecDeque;

impl Wire {
    /// A QP with writes queued, preferring `hint`'s.
    pub(crate) fn busy_qp(&self, hint: usize) -> Option<usize> {
        (0..self.nqps)
            .map(|i| (hint + i) % self.nqps)
            .find(|&q| !self.data[q].is_empty())
    }

    /// Kills every QP of the connection at the point `cut` names; `notice` says which side
    /// sees it. Everything in flight is lost; the sender's unpolled completions are polled
    /// after it resumes, as completions of destroyed QPs.
    pub(crate) fn cut(&mut self, cut: Cut, notice: Notice, hint: usize) {
        self.cuts += 1;
        let mut late = None;
        if self.alive {
            match cut {
                Cut::MidWrite => {
                    if let Some(q) = self.busy_qp(hint) {
                        let op = self.data[q].pop_front().unwrap();
                        self.place(op.from, op.to, op.len / 2);
                    }
                }
                Cut::DataBeforeImmediate | Cut::LateImmediate | Cut::ImmediateBeforeAck => {
                    if let Some(q) = self.busy_qp(hint) {
                        while let Some(op) = self.data[q].pop_front() {
                            match op.imm {
                                None => self.place(op.from, op.to, op.len),
                                Some(_) if cut == Cut::ImmediateBeforeAck => {
                                    self.data[q].push_front(op);
                                    self.deliver(q);
                                    break;
                                }
                                Some(imm) => {
                                    self.place(op.from, op.to, op.len);
                                    let (wr, _) = self.recv_wrs[q].pop_front().unwrap();
                                    late = Some((wr, imm));
                                    break;
                                }
                            }
                        }
                    }
                }
                Cut::MidClearToSend => {
                    if let Some((off, bytes)) = self.cts.pop_front() {
                        let at = self.fifo as usize + off;
                        let part = bytes.len() / 2 + 3;
                        self.arena[at..at + part].copy_from_slice(&bytes[..part]);
                    }
                }
                Cut::Plain => {}
            }
        }
        self.kill();
        for cq in &mut self.send_cq {
            self.stale_send.extend(cq.drain(..));
        }
        if notice != Notice::Sender {
            self.recv_notices();
            if let (Cut::LateImmediate, Some((wr, imm))) = (cut, late) {
                // It reaches a stopped receiver: ignored, and replayed.
                self.immediate(wr, imm);
            }
        } else if let (Cut::LateImmediate, Some(late)) = (cut, late) {
            // It reaches the receiver after its rebuild: ignored, and replayed.
            self.stale_recv.push(late);
        }
        if notice != Notice::Receiver {
            self.send_notices();
        }
    }

    /// Destroys the QPs' work: writes, posted receives and clear-to-send writes in flight.
    pub(crate) fn kill(&mut self) {
        self.alive = false;
        self.data.iter_mut().for_each(VecDeque::clear);
        self.recv_wrs.iter_mut().for_each(VecDeque::clear);
        self.cts.clear();
    }

    // ---- the recovery exchange ---------------------------------------------------------

    pub(crate) fn tell_receiver(&mut self, m: &Msg) {
        self.to_recv.push_back(wire::encode(m));
    }

    pub(crate) fn tell_sender(&mut self, m: &Msg) {
        self.to_send.push_back(wire::encode(m));
    }

    pub(crate) fn send_notices(&mut self) {
        let msgs = self
            .send
            .start_recovery(self.now, "QP error")
            .expect("sender stops");
        for m in &msgs {
            self.tell_receiver(m);
        }
    }

    pub(crate) fn recv_notices(&mut self) {
        let msgs = self
            .recv
            .start_recovery(self.now, "QP error")
            .expect("receiver stops");
        for m in &msgs {
            self.tell_sender(m);
        }
        self.recv_steps();
    }

    pub(crate) fn decode(bytes: &[u8]) -> Msg {
        let mut r = wire::Reader::new();
        r.push(bytes);
        r.poll()
            .expect("a well-formed message")
            .expect("a whole message")
    }

    /// The receiver takes the step its core asks for: rebuild its QPs (the fake's QP numbers
    /// name the epoch) and report them, or connect them to the sender's and resume.
    fn recv_steps(&mut self) {
        match self.recv.recovery_step() {
            Step::Rebuild => {
                let epoch = self.recv.recovery.epoch();
                let qpns = (0..self.nqps as u32).map(|q| epoch * 1000 + q).collect();
                let m = self.recv.qps_rebuilt(qpns, 0);
                self.tell_sender(&m);
            }
            Step::Connect(peer) => {
                let qpns = peer.qpns;
                assert_eq!(qpns.len(), self.nqps);
                let epoch = self.recv.recovery.epoch();
                assert_eq!(
                    qpns[0],
                    epoch * 1000 + 500,
                    "the sender's QPs of this epoch"
                );
                // Both sides' QPs of this epoch exist: the old ones are destroyed with
                // whatever they still held, the new ones connected.
                self.kill();
                self.alive = true;
                let r = self.recv.resume(epoch, self.now).expect("receiver resumes");
                for p in &r.reposts {
                    for q in p.qps() {
                        self.post_recv_wr(q, p.wr_id(q), p.seq);
                    }
                }
                if let Some(w) = &r.cts {
                    self.execute_cts(w);
                }
                for (wr, imm) in std::mem::take(&mut self.stale_recv) {
                    self.immediate(wr, imm);
                }
                self.tell_sender(&Msg::Resume { epoch });
            }
            Step::Run | Step::Wait => {}
        }
    }

    /// The receiver reads one message from the sender.
    pub(crate) fn recv_reads(&mut self) -> bool {
        let Some(bytes) = self.to_recv.pop_front() else {
            return false;
        };
        let msg = Wire::decode(&bytes);
        assert!(
            matches!(msg, Msg::Recover { .. } | Msg::Rebuilt { .. }),
            "the receiver got {msg:?}"
        );
        let answer = self
            .recv
            .on_recovery_msg(msg, self.now)
            .expect("the receiver takes the sender's message");
        for m in &answer {
            self.tell_sender(m);
        }
        self.recv_steps();
        true
    }

    /// The sender reads one message from the receiver.
    pub(crate) fn send_reads(&mut self) -> bool {
        let Some(bytes) = self.to_send.pop_front() else {
            return false;
        };
        let msg = Wire::decode(&bytes);
        let was_stopped = self.send.recovery.is_stopped();
        let answer = match self.send.on_recovery_msg(msg.clone(), self.now) {
            Ok(a) => a,
            Err(RecoveryError::NotReady(_)) => {
                let Msg::ReceiverState(st) = &msg else {
                    panic!("{msg:?} refused as early");
                };
                assert!(
                    st.epoch <= self.send.recovery.epoch(),
                    "a state of an epoch not entered"
                );
                Vec::new()
            }
            Err(e) => panic!("{e}"),
        };
        for m in &answer {
            self.tell_receiver(m);
        }
        if let Step::Connect(peer) = self.send.recovery_step() {
            let qpns = peer.qpns;
            let epoch = self.send.recovery.epoch();
            assert_eq!(qpns[0], epoch * 1000, "the receiver's QPs of this epoch");
            let own = (0..self.nqps as u32)
                .map(|q| epoch * 1000 + 500 + q)
                .collect();
            let m = self.send.qps_rebuilt(own, 0);
            self.tell_receiver(&m);
        }
        if was_stopped && !self.send.recovery.is_stopped() {
            self.replay();
            for wr in std::mem::take(&mut self.stale_send) {
                self.send.handle_completion(wr);
            }
            // NCCL tests at any time: a send finished early gives its buffer back now.
            self.test_sends();
        }
        true
    }
}
