//! Which QPs a connection has, over which member devices, and which of them each group uses.

use crate::MAX_DEVS;
use std::ops::Range;

/// How a connection's QPs map onto the member devices of both sides, and how groups use them.
/// Both sides build the same layout (the local and remote counts swapped), so they agree on
/// which QPs every group uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpLayout {
    pub nqps: usize,
    pub split: bool,
    /// Member devices of this side's (virtual) device.
    pub local_devs: usize,
    /// Member devices of the peer's.
    pub remote_devs: usize,
}

impl QpLayout {
    /// `qps_per_conn` QPs for every member pair: `qps_per_conn x max(local, remote)` QPs.
    pub fn new(qps_per_conn: usize, split: bool, local_devs: usize, remote_devs: usize) -> Self {
        let local_devs = local_devs.clamp(1, MAX_DEVS);
        let remote_devs = remote_devs.clamp(1, MAX_DEVS);
        QpLayout {
            nqps: qps_per_conn.max(1) * local_devs.max(remote_devs),
            split,
            local_devs,
            remote_devs,
        }
    }

    /// A connection between two physical devices.
    pub fn one_device(nqps: usize, split: bool) -> Self {
        QpLayout::new(nqps, split, 1, 1)
    }

    /// `NCCL_IB_QPS_PER_CONNECTION` as the layout was built with.
    pub fn qps_per_conn(&self) -> usize {
        self.nqps / self.local_devs.max(self.remote_devs).max(1)
    }

    /// QPs one message is spread over when not split: one per member of the larger side.
    pub fn data_qps(&self) -> usize {
        self.local_devs
            .max(self.remote_devs)
            .clamp(1, self.nqps.max(1))
    }

    /// This side's member device that QP `q` runs on.
    pub fn local_dev(&self, q: usize) -> usize {
        q % self.local_devs.max(1)
    }

    /// The peer's member device at the other end of QP `q`.
    pub fn remote_dev(&self, q: usize) -> usize {
        q % self.remote_devs.max(1)
    }

    /// Which QPs group `seq` uses: every QP when split, else its window of [`Self::data_qps`].
    pub fn group_qps(&self, seq: u64) -> Range<usize> {
        let nqps = self.nqps.max(1);
        if self.split {
            return 0..nqps;
        }
        let width = self.data_qps();
        let windows = (nqps / width).max(1) as u64;
        let start = (seq % windows) as usize * width;
        start..start + width
    }
}
