//! The data path over verbs: the plugin's transport executes, for each NCCL call, the verbs work
//! that the protocol core (`ferro_proto::comm`) decides, and feeds it the completions it polls.
//! It builds its work requests with `ferro_verbs::wr` and reads memory the NIC writes through
//! `ferro_verbs::volatile`: no raw work request and no volatile load is written here.
//!
//! - [`handshake`]: `listen`, `connect`, `accept` without blocking: the sockets and verbs
//!   resources of the core's handshake machine (`ferro_proto::handshake`);
//! - [`endpoint`]: QPs and their state transitions, the flush QP, registered protocol buffers;
//! - [`comm`]: a connected comm (either side), its CQ polling, liveness check and `test`;
//! - [`send`] / [`recv`]: `isend`, `irecv`, `iflush` and the posts they make;
//! - [`recovery`]: recovery in place executed: stopping, the exchange on the out-of-band
//!   connection, rebuilding and reconnecting the QPs, reposting and replaying;
//! - [`cts`]: the coalesced clear-to-send writes, and the backstop that lets any waiting call
//!   write out entries another comm holds staged (over [`receivers`], the registry of receive
//!   comms and its queue of those with entries staged);
//! - [`registration`]: `regMr`, `regMrDmaBuf`, `deregMr` through the registration cache;
//! - [`handles`]: the objects NCCL holds as `void*`, their magic words, and `close`;
//! - [`lock`]: the lock of a comm's protocol core;
//! - `faults` (only with the `test-faults` feature): fault injection for tests;
//! - [`access`]: who may do what to which memory (the access of every QP and registration).
//!
//! Every function here is non-blocking: `connect`/`accept` return `None` until the connection is
//! ready, `isend`/`irecv` return no request when they must wait (NCCL calls again).

mod access;
mod clock;
mod comm;
mod cts;
mod endpoint;
#[cfg(feature = "test-faults")]
pub mod faults;
mod handles;
mod handshake;
mod lock;
mod objects;
mod progress;
mod receivers;
mod recovery;
mod recv;
mod registration;
mod send;
mod send_cell;

pub use comm::ReqHandle;
pub use comm::{Comm, CommPtr, QpRetryAttrs};
pub use ferro_proto::comm::recv::RecvBuf;
pub use handles::{close, comm_ref, listen_ref, mr_ref, test_request};
pub use handshake::{ListenComm, connect, listen};
pub use objects::ObjectKind;
pub use registration::{MemKind, MrHandle, dereg_mr, reg_mr, reg_mr_dmabuf};
