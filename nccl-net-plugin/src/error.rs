//! The plugin's error type and its one mapping to `ncclResult_t`.

use ferro_ffi::ncclResult_t;
use std::fmt;

/// What went wrong, by who is at fault; the text names the cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// NCCL (or a harness) called us wrongly: bad pointer, unknown device, too many requests, a
    /// message larger than the posted receive.
    Usage(String),
    /// An argument value is invalid (e.g. a garbage or foreign listen handle).
    Argument(String),
    /// The system failed us: libibverbs, the NIC, the OS.
    System(String),
    /// The peer failed or misbehaved: a failed work completion, a dead connection, a protocol
    /// violation.
    Remote(String),
    /// A bug, a caught panic, or a function this build does not provide.
    Internal(String),
}

impl Error {
    pub fn code(&self) -> ncclResult_t {
        match self {
            Error::Usage(_) => ncclResult_t::InvalidUsage,
            Error::Argument(_) => ncclResult_t::InvalidArgument,
            Error::System(_) => ncclResult_t::SystemError,
            Error::Remote(_) => ncclResult_t::RemoteError,
            Error::Internal(_) => ncclResult_t::InternalError,
        }
    }

    /// The same error with `what` said before its text (`what: text`).
    pub fn prefixed(self, what: &str) -> Error {
        let f = |m: String| format!("{what}: {m}");
        match self {
            Error::Usage(m) => Error::Usage(f(m)),
            Error::Argument(m) => Error::Argument(f(m)),
            Error::System(m) => Error::System(f(m)),
            Error::Remote(m) => Error::Remote(f(m)),
            Error::Internal(m) => Error::Internal(f(m)),
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Error::Usage(m)
            | Error::Argument(m)
            | Error::System(m)
            | Error::Remote(m)
            | Error::Internal(m) => m,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}

impl From<ferro_verbs::Error> for Error {
    fn from(e: ferro_verbs::Error) -> Self {
        Error::System(e.to_string())
    }
}

/// A refused or broken connection setup: the peer's or the user's fault by what was refused.
impl From<ferro_proto::handshake::HandshakeError> for Error {
    fn from(e: ferro_proto::handshake::HandshakeError) -> Self {
        use ferro_proto::handshake::HandshakeError as H;
        let text = e.to_string();
        match e {
            H::SettingsDiffer { .. }
            | H::QpCount { .. }
            | H::LinkLayers { .. }
            | H::TooManyQps { .. }
            | H::PeerRejected { .. } => Error::Usage(text),
            H::WrongSecret { .. }
            | H::PathNotEchoed { .. }
            | H::Unexpected { .. }
            | H::Wire { .. }
            | H::PeerClosed { .. }
            | H::NoSecret { .. }
            | H::TimedOut { .. } => Error::Remote(text),
            H::Abandoned { .. } => Error::System(text),
            H::OutOfOrder { .. } => Error::Internal(text),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;
    use ferro_proto::handshake::{HandshakeError as H, Settings, Stage};
    use ferro_proto::path::QpPath;
    use std::time::Duration;

    #[test]
    fn handshake_refusals_are_usage_errors_and_peer_faults_remote_errors() {
        let peer = || "10.0.0.1:1".to_string();
        let one = Settings {
            qps_per_conn: 1,
            split: false,
        };
        let usage = [
            H::SettingsDiffer {
                peer: peer(),
                local: one,
                remote: Settings {
                    qps_per_conn: 2,
                    split: false,
                },
            },
            H::TooManyQps {
                qps_per_conn: 64,
                devs: 3,
                nqps: 192,
            },
            H::PeerRejected {
                peer: peer(),
                reason: "no".into(),
            },
        ];
        for e in usage {
            let text = e.to_string();
            assert_eq!(Error::from(e), Error::Usage(text));
        }
        let remote = [
            H::WrongSecret { peer: peer() },
            H::PeerClosed { peer: peer() },
            H::PathNotEchoed {
                peer: peer(),
                sent: QpPath { tc: 32, sl: 3 },
                echoed: QpPath { tc: 0, sl: 0 },
            },
            H::TimedOut {
                peer: peer(),
                stage: Stage::AwaitAccept,
                after: Duration::from_secs(120),
            },
        ];
        for e in remote {
            let text = e.to_string();
            assert_eq!(Error::from(e), Error::Remote(text));
        }
        let bug = H::OutOfOrder {
            call: "qps_connected",
            stage: Stage::AwaitConnect,
        };
        assert_eq!(Error::from(bug).code(), ncclResult_t::InternalError);
    }
}
