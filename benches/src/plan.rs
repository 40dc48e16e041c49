//! What the server measures ([`Plan`]: mode, sizes, window, targets) and the buffer sizes that
//! follow from it; shared by the measurement loops (`bench`, `comms`) and the command line.

use crate::model::Mode;
use std::time::Duration;

/// Receives each side keeps posted ahead in `lat` by default (and the most it may keep), as
/// NCCL's proxy posts receives for the next steps ahead of time: the clear-to-send that a
/// receive sends to its peer is then off the critical path of the round trip. Buffers have one
/// slot per receive in flight. `--post-ahead 0` posts each receive just before the send that
/// precedes its message instead (the server: the echo's receive just before the ping; the
/// client: the next ping's receive just before the echo), as NCCL's proxy does when it is not
/// ahead of the peer.
pub(crate) const LAT_DEPTH: u64 = 2;

/// The server's plan.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) mode: Mode,
    pub(crate) sizes: Vec<u64>,
    pub(crate) window: usize,
    /// Cap on measured messages (bw) or round trips (lat) per size.
    pub(crate) max_iters: Option<u64>,
    /// Time target per size.
    pub(crate) target: Duration,
    /// Warm-up round trips per size (lat).
    pub(crate) warmup: u64,
    /// Comms per direction (comms mode).
    pub(crate) comms: usize,
    /// Receives posted ahead in `lat`, 0..=[`LAT_DEPTH`].
    pub(crate) post_ahead: u64,
}

/// Largest bw buffer (more window slots than fit are reused round-robin, as perftest reuses
/// its buffer): registration is slow under emulation, and the content does not matter.
pub(crate) const BUF_CAP: u64 = 16 << 20;

impl Plan {
    fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// The data moving direction (client → server) of bw: `window` slots of small sizes,
    /// at least one slot of the largest.
    fn bw_bytes(&self) -> u64 {
        let max = self.max_size();
        (max.saturating_mul(self.window as u64))
            .min(BUF_CAP)
            .max(max)
            .max(4096)
    }

    /// (client send, client receive) buffer bytes.
    pub(crate) fn buffers(&self) -> (u64, u64) {
        match self.mode {
            Mode::Bw | Mode::Rate | Mode::Comms => (self.bw_bytes(), 4096),
            Mode::Lat => {
                let b = (LAT_DEPTH * self.max_size()).max(4096);
                (b, b)
            }
        }
    }

    pub(crate) fn slots(&self, size: u64) -> u64 {
        if size == 0 {
            return self.window as u64;
        }
        (self.bw_bytes() / size).clamp(1, self.window as u64)
    }
}
