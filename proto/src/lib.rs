//! Layer 3 of 5, the protocol core (no I/O): everything here is plain data and pure functions,
//! so it is tested on any machine without RDMA.
//!
//! - [`handle`]: the 128-byte listen handle NCCL carries between ranks.
//! - [`wire`]: the out-of-band handshake messages (queue-pair metadata, ready, reject), decoded
//!   incrementally from a non-blocking socket.
//! - [`fifo`]: the receiver-driven clear-to-send FIFO: entry encoding (with a sequence number and
//!   a check word, so a torn or stale entry is never taken for a posted receive), slot arithmetic.
//! - [`plan`]: how a matched group of sends becomes RDMA writes over one or several QPs, and
//!   which QPs a group uses.
//! - [`comm`]: the comm state machine: request table, send-group matching, in-flight
//!   bookkeeping, completion handling, the `wr_id` encoding and the sticky error. The plugin's
//!   transport only executes the verbs work it names.
//!
//! `docs/DESIGN.md` describes the protocol these modules implement.
#![forbid(unsafe_code)]

pub mod comm;
pub mod fifo;
pub mod handle;
pub mod plan;
pub mod wire;

/// Wire protocol version carried in the listen handle and every handshake message. Peers with a
/// different version refuse to connect, with an error naming both versions.
pub const WIRE_VERSION: u16 = 3;
/// `"FERRONET"` as a little-endian u64: first bytes of the handle and of every message.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FERRONET");
/// Slots in the CTS FIFO: receives one comm can have posted at once (NCCL's request limit).
pub const SLOTS: usize = 32;
/// Buffers in one grouped receive (advertised as `maxRecvs`).
pub const MAX_RECVS: usize = 8;
/// Most QPs per connection (`NCCL_IB_QPS_PER_CONNECTION`'s range).
pub const MAX_QPS: usize = 128;
/// Most physical devices behind one (virtual) device: NCCL fuses up to 8 (ABI v12; 4 before).
pub const MAX_DEVS: usize = 8;
/// One memory key per member device of a (virtual) device, indexed by member; unused ones are 0.
pub type Keys = [u32; MAX_DEVS];
