//! Layer 3 of 5, the protocol core (no I/O): everything here is plain data and pure functions,
//! so it is tested on any machine without RDMA.
//!
//! - [`handle`]: the 128-byte listen handle NCCL carries between ranks.
//! - [`wire`]: the out-of-band messages (the handshake's: queue-pair metadata, ready, reject;
//!   recovery's: recover, the receiver's state, rebuilt QPs, resume), decoded incrementally from
//!   a non-blocking socket.
//! - [`handshake`]: connection setup as a state machine fed with bytes and the time: the stages
//!   of both sides, the secret, settings, QP-count, QP-limit and link-layer checks, `Reject`,
//!   and the handshake time-out. The plugin's transport only moves its bytes and creates the
//!   verbs resources it asks for.
//! - [`path`]: the traffic class and service level of a connection's QPs: the sending side's
//!   choice, which the receiving side adopts (with `NCCL_IB_FIFO_TC` on its own RoCE QPs).
//! - [`fifo`]: the receiver-driven clear-to-send FIFO: entry encoding (with a sequence number and
//!   a check word, so a torn or stale entry is never taken for a posted receive), slot arithmetic.
//! - [`plan`]: how a matched group of sends becomes RDMA writes over one or several QPs, and
//!   which QPs a group uses.
//! - [`comm`]: the comm state machine: request table, send-group matching, in-flight
//!   bookkeeping, completion handling, the `wr_id` encoding and the counters. The plugin's
//!   transport only executes the verbs work it names.
//! - [`health`]: the fault policy: from facts the transport gathers (device events, the
//!   out-of-band socket, failed completions, refused posts and polls, the time) to a verdict
//!   (continue, warn of a stall, fail, or poll once more and then fail); the per-device event
//!   record, the sticky error, the pacing of the periodic look and the stall watchdog.
//! - [`qp_retry`]: retrying a QP state change that failed (`NCCL_IB_MQP_RETRY_*`) without
//!   blocking: which failures, when next, when to give up, and the progress of connecting a
//!   connection's QPs one state change at a time.
//! - [`route`]: where a connection's packets go, from GIDs and LIDs: rail locality, the device
//!   on the peer's subnet, an InfiniBand peer behind a router (FLID).
//! - [`recovery`]: recovery in place after a comm's QPs fail while its peer lives: the epoch
//!   that makes completions of destroyed QPs harmless, the receiver's report of what arrived,
//!   what the sender replays, and the budget.
//!
//! `docs/DESIGN.md` describes the protocol these modules implement.
#![forbid(unsafe_code)]

pub mod comm;
pub mod fifo;
pub mod handle;
pub mod handshake;
pub mod health;
pub mod path;
pub mod plan;
pub mod qp_retry;
pub mod recovery;
pub mod route;
pub mod wire;

/// Wire protocol version carried in the listen handle and every handshake message. Peers with a
/// different version refuse to connect, with an error naming both versions. Version 4: `Connect`
/// and `Accept` carry the connection's traffic class and service level ([`path::QpPath`]).
/// Version 5: they also carry each QP's enhanced connection establishment ([`wire::Ece`]).
pub const WIRE_VERSION: u16 = 5;
/// `"FERRONET"` as a little-endian u64: first bytes of the handle and of every message.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FERRONET");
/// Slots in the CTS FIFO: receives one comm can have posted at once (NCCL's request limit).
pub const SLOTS: usize = 32;
/// Buffers in one grouped receive (advertised as `maxRecvs`).
pub const MAX_RECVS: usize = 8;
/// Signal one clear-to-send write in this many: its completion retires the unsignaled ones
/// before it on the same QP, so the send queue never fills and the receiver's CQ carries one
/// CTS completion per 16 receives instead of one each. The queue depths ([`plan`]) and the
/// receive core ([`comm::recv`]) both follow it.
pub const CTS_SIGNAL_EVERY: u64 = 16;
/// Most QPs per connection (`NCCL_IB_QPS_PER_CONNECTION`'s range).
pub const MAX_QPS: usize = 128;
/// Most physical devices behind one (virtual) device: NCCL fuses up to 8 (ABI v12; 4 before).
pub const MAX_DEVS: usize = 8;
/// One memory key per member device of a (virtual) device, indexed by member; unused ones are 0.
pub type Keys = [u32; MAX_DEVS];
