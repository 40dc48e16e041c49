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
    /// Members of this side that are down (bit `m` for member `m`): their QPs run on the next
    /// member up instead (failover inside a virtual NIC; zero for a connection that never failed
    /// over).
    pub local_down: u8,
    /// Members of the peer that are down, as the peer said in the recovery exchange.
    pub remote_down: u8,
}

/// The member a QP whose home member is `home` runs on when the members in `down` are down:
/// its home, else the next member up (in member order, wrapping); its home when every member is
/// down.
#[inline]
fn member_up(home: usize, members: usize, down: u8) -> usize {
    if down == 0 {
        return home;
    }
    (0..members)
        .map(|k| (home + k) % members)
        .find(|&m| m >= 8 || down & (1 << m) == 0)
        .unwrap_or(home)
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
            local_down: 0,
            remote_down: 0,
        }
    }

    /// The same layout with these members down on each side (see [`QpLayout::local_down`]).
    pub fn with_down(self, local_down: u8, remote_down: u8) -> Self {
        QpLayout {
            local_down,
            remote_down,
            ..self
        }
    }

    /// This side's member device that QP `q` belongs to when every member is up.
    #[inline]
    pub fn home_local_dev(&self, q: usize) -> usize {
        q % self.local_devs.max(1)
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
    #[inline]
    pub fn data_qps(&self) -> usize {
        self.local_devs
            .max(self.remote_devs)
            .clamp(1, self.nqps.max(1))
    }

    /// This side's member device that QP `q` runs on: its home member, or the next one up
    /// when that one is down.
    #[inline]
    pub fn local_dev(&self, q: usize) -> usize {
        let n = self.local_devs.max(1);
        if n == 1 {
            return 0;
        }
        member_up(q % n, n, self.local_down)
    }

    /// The peer's member device at the other end of QP `q` (its home, or the next one up there).
    #[inline]
    pub fn remote_dev(&self, q: usize) -> usize {
        let n = self.remote_devs.max(1);
        if n == 1 {
            return 0;
        }
        member_up(q % n, n, self.remote_down)
    }

    /// Which QPs group `seq` uses: every QP when split, else its window of [`Self::data_qps`].
    #[inline]
    pub fn group_qps(&self, seq: u64) -> Range<usize> {
        let nqps = self.nqps.max(1);
        if self.split {
            return 0..nqps;
        }
        let width = self.data_qps();
        if width == 1 {
            // One QP per group (a physical device on both sides): QP `seq % nqps`.
            return if nqps == 1 {
                0..1
            } else {
                let q = (seq % nqps as u64) as usize;
                q..q + 1
            };
        }
        let windows = (nqps / width).max(1) as u64;
        let start = (seq % windows) as usize * width;
        start..start + width
    }
}
