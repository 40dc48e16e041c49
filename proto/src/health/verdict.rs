//! What the fault policy answers ([`Verdict`]), why a comm fails ([`Fault`], [`Failure`]), and
//! the wording of every fault message and stall warning (operators and the guest tests read
//! them).

use super::device::DeviceFault;
use super::facts::{FailedCompletion, PeerGone};
use super::watchdog::Stall;
use std::fmt;

/// What the transport does about a comm, after a look or a fact met while polling or posting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The comm's QPs failed but its peer may be alive: recover in place (see
    /// [`crate::recovery`]); the text says what failed.
    Recover(String),
    /// Nothing to do: keep waiting.
    Continue,
    /// The comm has made no progress for a while: log one WARN
    /// ([`Stall::warning`]) and keep waiting.
    Warn(Stall),
    /// The comm fails now with this failure.
    Fail(Failure),
    /// The comm fails, but first drains its completion queues once more so that work that
    /// completed before the fault still counts; then it fails with [`Fault::failure`], which
    /// says what was still pending after that last poll.
    PollThenFail(Fault),
}

/// Why a comm that was waiting cannot go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Its device's events say so (port down, QP or CQ error, fatal device error).
    Device(DeviceFault),
    /// The peer's out-of-band connection ended.
    PeerGone(PeerGone),
}

impl Fault {
    /// The comm's failure: `comm` names the comm (device and peer), `pending` what it was still
    /// waiting for. A device fault is the system's ([`FailureKind::System`]), a dead peer the
    /// peer's ([`FailureKind::Remote`]).
    pub fn failure(&self, comm: &str, pending: &str) -> Failure {
        match self {
            Fault::Device(d) => Failure::system(format!("{comm}: {d}; {pending}")),
            Fault::PeerGone(PeerGone::Failed(why)) => Failure::remote(format!(
                "{comm}: the peer failed the comm: {why}; {pending}"
            )),
            Fault::PeerGone(how) => Failure::remote(format!(
                "{comm}: peer {} while requests were outstanding; {pending}",
                PeerGoneReason(how)
            )),
        }
    }
}

/// How a dead peer is said, with the likely cause.
struct PeerGoneReason<'a>(&'a PeerGone);

impl fmt::Display for PeerGoneReason<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            PeerGone::Closed => {
                f.write_str("closed the connection (process exited or was killed?)")
            }
            PeerGone::TimedOut(e) => write!(
                f,
                "stopped answering: the out-of-band connection timed out after unanswered keepalive probes ({e}; host down or network partitioned?)"
            ),
            PeerGone::Error(e) => write!(
                f,
                "connection error: {e} (process killed or host rebooted?)"
            ),
            PeerGone::Failed(why) => write!(f, "failed the comm: {why}"),
        }
    }
}

/// Whether a failed work completion's status says the path failed (the link, the QP, the
/// peer's QP, the device): what recovery in place can repair. The others (length, protection
/// and access errors, a remote invalid request) are the same again after a rebuild: a bug or a
/// bad buffer, never recovered. `LOC_QP_OP_ERR` is a path failure too: soft-RoCE reports a
/// packet it cannot send (its link is down) with it; where it means a malformed request, the
/// replay fails the same way until the recovery budget is spent.
pub fn is_path_failure(status: u32) -> bool {
    matches!(
        status,
        // LOC_QP_OP_ERR, WR_FLUSH_ERR, BAD_RESP_ERR, RETRY_EXC_ERR, RNR_RETRY_EXC_ERR,
        // REM_ABORT_ERR, FATAL_ERR, RESP_TIMEOUT_ERR, GENERAL_ERR
        2 | 5 | 7 | 12 | 13 | 16 | 19 | 20 | 21
    )
}

/// The verdict on a work completion with an error status. With recovery in place on
/// (`recover`) a path failure is recovered; otherwise (and for every other status) it is the
/// peer's failure, at once: a failed completion is never retried as it is.
pub fn failed_completion(comm: &str, wc: &FailedCompletion<'_>, recover: bool) -> Verdict {
    let what = format!(
        "work completion failed on {}:{}: {} (status {}, vendor error {:#x}, opcode {}, QP {})",
        wc.device, wc.port, wc.status_name, wc.status, wc.vendor_err, wc.opcode, wc.qp_num
    );
    if recover && is_path_failure(wc.status) {
        Verdict::Recover(what)
    } else {
        Verdict::Fail(Failure::remote(format!("{comm}: {what}")))
    }
}

/// The verdict on a post or poll that libibverbs refused: the system's failure, at once. `what`
/// is the refused operation's error, already saying what it was.
pub fn refused(comm: &str, what: &dyn fmt::Display) -> Verdict {
    Verdict::Fail(Failure::system(format!("{comm}: {what}")))
}

/// What a refused post of one of a flush's reads means for the receive comm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushRefused {
    /// None of the flush's reads was posted: only the flush is abandoned (its request freed, the
    /// call returns the error) and the comm goes on.
    AbortFlush,
    /// Some reads were posted and will complete against a request NCCL was told failed: the
    /// comm fails (the system's failure, as any refused post).
    FailComm,
}

/// The verdict on a flush whose read on one member was refused after `reads_posted` reads on
/// the members before it were posted.
pub fn flush_refused(reads_posted: usize) -> FlushRefused {
    if reads_posted == 0 {
        FlushRefused::AbortFlush
    } else {
        FlushRefused::FailComm
    }
}

impl Stall {
    /// The WARN for this stall of the `side` ("send" or "receive") comm `comm`, which waits
    /// for `pending`, with its counters' `summary`.
    pub fn warning(&self, comm: &str, side: &str, pending: &str, summary: &str) -> String {
        format!(
            "{comm}: {side} comm made no progress for {} s: {pending}; {summary}",
            self.idle.as_secs()
        )
    }
}

/// Whose fault a comm failure is; the transport maps it to NCCL's result codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The peer failed or misbehaved (a failed work completion, a dead connection).
    Remote,
    /// The system failed us (a post or poll refused by libibverbs, a device event).
    System,
    /// The caller broke the contract (a send larger than the posted receive).
    Usage,
}

/// Why a comm stopped working. Sticky: kept by the core and reported by every later call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

impl Failure {
    pub fn remote(message: impl Into<String>) -> Failure {
        Failure {
            kind: FailureKind::Remote,
            message: message.into(),
        }
    }

    pub fn system(message: impl Into<String>) -> Failure {
        Failure {
            kind: FailureKind::System,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            kind: FailureKind::Usage,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
