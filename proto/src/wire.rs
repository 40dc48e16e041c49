//! Out-of-band handshake messages, exchanged over the TCP connection that `connect` opens to the
//! listener. Every message starts with a 16-byte header:
//! `magic u64 | version u16 | kind u16 | body length u32` (all little-endian).
//!
//! Flow: the connecting side sends [`Kind::Connect`] (its QPs and its FIFO), the accepting side
//! answers [`Kind::Accept`] (its QPs and its sizes FIFO) or [`Kind::Reject`] (a reason, e.g.
//! mismatched settings), and the connecting side, once its QPs are ready to receive, sends
//! [`Kind::Ready`]. The connection then stays open for the comm's life as a liveness signal.
//!
//! The same connection carries the recovery exchange (`docs/DESIGN.md`, "Recovery in place"):
//! [`Kind::Recover`] (each side, once per epoch it enters), [`Kind::ReceiverState`] (the
//! receiver's report of what arrived), [`Kind::Rebuilt`] (a side's new QP numbers: the
//! receiver's first, then the sender's once its QPs are connected) and [`Kind::Resume`] (the
//! receiver reposted its receives and its clear-to-send entries: the sender replays). The
//! handshake's messages are unchanged by them, byte for byte.
//!
//! `Connect` and `Accept` carry the connection's traffic class and service level
//! ([`QpPath`]): the sender's choice, echoed by the receiver. They were added in wire version 4
//! rather than as an optional trailer: a peer of version 3 would either refuse the extra bytes
//! with a puzzling "trailing bytes" or, the other way round, leave the receiver to guess the
//! class, so mixed versions are refused up front with the version error instead.
//!
//! Version 5 adds, after the QP numbers, each QP's enhanced connection establishment
//! ([`Ece`], `NCCL_IB_ECE_ENABLE`): none at all (a count of 0: the side's provider has none, or
//! it is off), or one optional entry per QP. The connecting side sends what its QPs support;
//! the accepting side sets that on its QPs and answers with what they then report (the
//! options both support); the connecting side sets the answer on its QPs before they connect.

use crate::handle::SECRET_SIZE;
use crate::path::{MAX_SL, QpPath};
use crate::recovery::{GroupArrivals, ReceiverState};
use crate::{MAGIC, MAX_DEVS, MAX_QPS, SLOTS, WIRE_VERSION};
use std::fmt;

pub const HEADER: usize = 16;
/// Largest body accepted; anything bigger is garbage.
pub const MAX_BODY: usize = 80 + DEV_META_BYTES * MAX_DEVS + 4 * MAX_QPS + 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Connect = 1,
    Accept = 2,
    Ready = 3,
    Reject = 4,
    Recover = 5,
    ReceiverState = 6,
    Rebuilt = 7,
    Resume = 8,
}

impl Kind {
    fn from_u16(v: u16) -> Option<Kind> {
        Some(match v {
            1 => Kind::Connect,
            2 => Kind::Accept,
            3 => Kind::Ready,
            4 => Kind::Reject,
            5 => Kind::Recover,
            6 => Kind::ReceiverState,
            7 => Kind::Rebuilt,
            8 => Kind::Resume,
            _ => return None,
        })
    }
}

/// What the peer needs to reach one member device of a side (a physical device has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevMeta {
    /// 1 = InfiniBand, 2 = Ethernet (RoCE), as verbs encodes it.
    pub link_layer: u8,
    pub port: u8,
    pub lid: u16,
    pub mtu: u32,
    pub gid: [u8; 16],
    pub gid_index: u32,
    /// The key of the side's protocol region (see [`QpMeta::mr_addr`]) on this device.
    pub mr_rkey: u32,
}

/// One QP's enhanced connection establishment (`struct ibv_ece`): the vendor, the options it
/// supports or agreed on, and which fields are valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// Bytes of one optional [`Ece`] on the wire: a presence byte and three u32.
const ECE_BYTES: usize = 13;

/// Bytes of one [`DevMeta`] on the wire.
const DEV_META_BYTES: usize = 32;

/// One side's queue-pair metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpMeta {
    /// `NCCL_IB_QPS_PER_CONNECTION` and split mode: must agree on both sides.
    pub qps_per_conn: u16,
    pub split: bool,
    /// The traffic class and service level of the connection's QPs. Connect: the sender's
    /// choice. Accept: the same, echoed (the receiver's QPs were built with them).
    pub path: QpPath,
    /// The side's member devices, in member order (1 to [`MAX_DEVS`]).
    pub devs: Vec<DevMeta>,
    /// Connect: the sender's CTS FIFO. Accept: the receiver's sizes FIFO. Registered on every
    /// member device, with the keys in `devs`.
    pub mr_addr: u64,
    /// The QPs, `qps_per_conn x max(this side's, the peer's member count)`; QP `q` is on member
    /// `q % devs.len()`.
    pub qpns: Vec<u32>,
    /// Each QP's enhanced connection establishment, in `qpns` order (`None`: that QP has none);
    /// empty when the side has none at all.
    pub eces: Vec<Option<Ece>>,
    /// Connect: the listener's secret from the handle (proves the connector holds the handle).
    /// Accept: zero.
    pub secret: [u8; SECRET_SIZE],
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    Connect(QpMeta),
    Accept(QpMeta),
    Ready,
    Reject(String),
    /// Recovery: this side stopped at `epoch` (sent once per epoch entered, by each side).
    Recover {
        epoch: u32,
    },
    /// Recovery: the receiver's report at its stop.
    ReceiverState(ReceiverState),
    /// Recovery: this side's rebuilt QPs of `epoch` (in the handshake's QP order), and which
    /// of its member devices are down (bit `m` for member `m`: their QPs run on the next member
    /// up, [`crate::plan::QpLayout::local_down`]).
    Rebuilt {
        epoch: u32,
        qpns: Vec<u32>,
        down: u8,
    },
    /// Recovery: the receiver runs again at `epoch`; the sender replays and resumes.
    Resume {
        epoch: u32,
    },
}

impl Msg {
    /// The message's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Msg::Connect(_) => Kind::Connect,
            Msg::Accept(_) => Kind::Accept,
            Msg::Ready => Kind::Ready,
            Msg::Reject(_) => Kind::Reject,
            Msg::Recover { .. } => Kind::Recover,
            Msg::ReceiverState(_) => Kind::ReceiverState,
            Msg::Rebuilt { .. } => Kind::Rebuilt,
            Msg::Resume { .. } => Kind::Resume,
        }
    }
}

/// Why bytes from a peer were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    BadMagic(u64),
    Version { got: u16, want: u16 },
    BadKind(u16),
    TooLong(usize),
    Malformed(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::BadMagic(m) => write!(
                f,
                "peer sent bytes that are not this plugin's protocol (magic {m:#018x}): a stray connection or a rank running another plugin"
            ),
            WireError::Version { got, want } => write!(
                f,
                "peer speaks wire version {got}, this plugin {want}: all ranks must run the same plugin version"
            ),
            WireError::BadKind(k) => write!(f, "peer sent unknown message kind {k}"),
            WireError::TooLong(n) => {
                write!(f, "peer announced a {n}-byte message (limit {MAX_BODY})")
            }
            WireError::Malformed(what) => write!(f, "malformed out-of-band message: {what}"),
        }
    }
}

impl std::error::Error for WireError {}

fn header(kind: Kind, body_len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + body_len);
    v.extend_from_slice(&MAGIC.to_le_bytes());
    v.extend_from_slice(&WIRE_VERSION.to_le_bytes());
    v.extend_from_slice(&(kind as u16).to_le_bytes());
    v.extend_from_slice(&(body_len as u32).to_le_bytes());
    v
}

fn meta_body(m: &QpMeta) -> Vec<u8> {
    let mut b = Vec::with_capacity(
        36 + DEV_META_BYTES * m.devs.len() + 4 * m.qpns.len() + ECE_BYTES * m.eces.len(),
    );
    b.extend_from_slice(&m.secret);
    b.extend_from_slice(&m.qps_per_conn.to_le_bytes());
    b.push(u8::from(m.split));
    b.push(m.devs.len() as u8);
    b.push(m.path.tc);
    b.push(m.path.sl);
    b.extend_from_slice(&m.mr_addr.to_le_bytes());
    for d in &m.devs {
        b.push(d.link_layer);
        b.push(d.port);
        b.extend_from_slice(&d.lid.to_le_bytes());
        b.extend_from_slice(&d.mtu.to_le_bytes());
        b.extend_from_slice(&d.gid);
        b.extend_from_slice(&d.gid_index.to_le_bytes());
        b.extend_from_slice(&d.mr_rkey.to_le_bytes());
    }
    b.extend_from_slice(&(m.qpns.len() as u32).to_le_bytes());
    for q in &m.qpns {
        b.extend_from_slice(&q.to_le_bytes());
    }
    b.extend_from_slice(&(m.eces.len() as u32).to_le_bytes());
    for e in &m.eces {
        let e = e.as_ref();
        b.push(u8::from(e.is_some()));
        let e = e.copied().unwrap_or_default();
        b.extend_from_slice(&e.vendor_id.to_le_bytes());
        b.extend_from_slice(&e.options.to_le_bytes());
        b.extend_from_slice(&e.comp_mask.to_le_bytes());
    }
    b
}

/// Encodes a message.
pub fn encode(msg: &Msg) -> Vec<u8> {
    let (kind, body) = match msg {
        Msg::Connect(m) => (Kind::Connect, meta_body(m)),
        Msg::Accept(m) => (Kind::Accept, meta_body(m)),
        Msg::Ready => (Kind::Ready, Vec::new()),
        Msg::Reject(r) => {
            let mut b = r.as_bytes().to_vec();
            b.truncate(1024);
            (Kind::Reject, b)
        }
        Msg::Recover { epoch } => (Kind::Recover, epoch.to_le_bytes().to_vec()),
        Msg::Resume { epoch } => (Kind::Resume, epoch.to_le_bytes().to_vec()),
        Msg::ReceiverState(st) => {
            let mut b = Vec::with_capacity(14 + 24 * st.outstanding.len());
            b.extend_from_slice(&st.epoch.to_le_bytes());
            b.extend_from_slice(&st.next_seq.to_le_bytes());
            b.extend_from_slice(&(st.outstanding.len() as u16).to_le_bytes());
            for g in &st.outstanding {
                b.extend_from_slice(&g.seq.to_le_bytes());
                b.extend_from_slice(&g.arrived.to_le_bytes());
            }
            (Kind::ReceiverState, b)
        }
        Msg::Rebuilt { epoch, qpns, down } => {
            let mut b = Vec::with_capacity(9 + 4 * qpns.len());
            b.extend_from_slice(&epoch.to_le_bytes());
            b.extend_from_slice(&(qpns.len() as u32).to_le_bytes());
            for q in qpns {
                b.extend_from_slice(&q.to_le_bytes());
            }
            b.push(*down);
            (Kind::Rebuilt, b)
        }
    };
    let mut v = header(kind, body.len());
    v.extend_from_slice(&body);
    v
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        if self.0.len() < N {
            return Err(WireError::Malformed("body too short"));
        }
        let mut a = [0u8; N];
        a.copy_from_slice(&self.0[..N]);
        self.0 = &self.0[N..];
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    fn u128(&mut self) -> Result<u128, WireError> {
        Ok(u128::from_le_bytes(self.take()?))
    }
    /// Refuses bytes after the message.
    fn end(&self) -> Result<(), WireError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(WireError::Malformed("trailing bytes"))
        }
    }
}

/// The body of a message that is only an epoch.
fn decode_epoch(body: &[u8]) -> Result<u32, WireError> {
    let mut c = Cursor(body);
    let epoch = c.u32()?;
    c.end()?;
    Ok(epoch)
}

fn decode_receiver_state(body: &[u8]) -> Result<ReceiverState, WireError> {
    let mut c = Cursor(body);
    let epoch = c.u32()?;
    let next_seq = c.u64()?;
    let count = usize::from(c.u16()?);
    if count > SLOTS {
        return Err(WireError::Malformed(
            "more outstanding groups than FIFO slots",
        ));
    }
    let mut outstanding = Vec::with_capacity(count);
    for _ in 0..count {
        outstanding.push(GroupArrivals {
            seq: c.u64()?,
            arrived: c.u128()?,
        });
    }
    c.end()?;
    let st = ReceiverState {
        epoch,
        next_seq,
        outstanding,
    };
    if !st.is_well_formed() {
        return Err(WireError::Malformed(
            "outstanding groups out of order or outside the last 32 posted",
        ));
    }
    Ok(st)
}

fn decode_rebuilt(body: &[u8]) -> Result<Msg, WireError> {
    let mut c = Cursor(body);
    let epoch = c.u32()?;
    let count = c.u32()? as usize;
    if count == 0 || count > MAX_QPS {
        return Err(WireError::Malformed("rebuilt QP count out of range"));
    }
    let mut qpns = Vec::with_capacity(count);
    for _ in 0..count {
        qpns.push(c.u32()?);
    }
    let down = c.u8()?;
    c.end()?;
    Ok(Msg::Rebuilt { epoch, qpns, down })
}

fn decode_meta(body: &[u8]) -> Result<QpMeta, WireError> {
    let mut c = Cursor(body);
    let secret = c.take::<SECRET_SIZE>()?;
    let qps_per_conn = c.u16()?;
    let split = c.u8()? != 0;
    let ndevs = usize::from(c.u8()?);
    if ndevs == 0 || ndevs > MAX_DEVS {
        return Err(WireError::Malformed("device count out of range"));
    }
    let path = QpPath {
        tc: c.u8()?,
        sl: c.u8()?,
    };
    if path.sl > MAX_SL {
        return Err(WireError::Malformed("service level above 15"));
    }
    let mr_addr = c.u64()?;
    let mut devs = Vec::with_capacity(ndevs);
    for _ in 0..ndevs {
        let link_layer = c.u8()?;
        let port = c.u8()?;
        devs.push(DevMeta {
            link_layer,
            port,
            lid: c.u16()?,
            mtu: c.u32()?,
            gid: c.take::<16>()?,
            gid_index: c.u32()?,
            mr_rkey: c.u32()?,
        });
    }
    let count = c.u32()? as usize;
    // qps_per_conn QPs for each member of the larger side: a multiple of qps_per_conn, at
    // least one per member of this side.
    let qpc = usize::from(qps_per_conn);
    if count == 0
        || count > MAX_QPS
        || qpc == 0
        || count % qpc != 0
        || !(ndevs..=MAX_DEVS).contains(&(count / qpc))
    {
        return Err(WireError::Malformed(
            "QP count out of range or inconsistent",
        ));
    }
    let mut qpns = Vec::with_capacity(count);
    for _ in 0..count {
        qpns.push(c.u32()?);
    }
    let neces = c.u32()? as usize;
    if neces != 0 && neces != count {
        return Err(WireError::Malformed(
            "ECE entries neither absent nor one per QP",
        ));
    }
    let mut eces = Vec::with_capacity(neces);
    for _ in 0..neces {
        let present = c.u8()? != 0;
        let e = Ece {
            vendor_id: c.u32()?,
            options: c.u32()?,
            comp_mask: c.u32()?,
        };
        eces.push(present.then_some(e));
    }
    if !c.0.is_empty() {
        return Err(WireError::Malformed("trailing bytes"));
    }
    Ok(QpMeta {
        qps_per_conn,
        split,
        path,
        devs,
        mr_addr,
        qpns,
        eces,
        secret,
    })
}

/// Accumulates bytes from a non-blocking socket until a whole message is there.
#[derive(Debug, Default)]
pub struct Reader {
    buf: Vec<u8>,
}

impl Reader {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many more bytes to read before [`Reader::poll`] can make progress.
    pub fn wanted(&self) -> usize {
        if self.buf.len() < HEADER {
            return HEADER - self.buf.len();
        }
        let mut l = [0u8; 4];
        l.copy_from_slice(&self.buf[12..16]);
        let body = u32::from_le_bytes(l) as usize;
        (HEADER + body.min(MAX_BODY)).saturating_sub(self.buf.len())
    }

    /// Appends bytes read from the socket (at most [`Reader::wanted`] of them).
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received so far.
    pub fn received(&self) -> usize {
        self.buf.len()
    }

    /// A whole message, `Ok(None)` if more bytes are needed, or why the bytes are garbage. The
    /// header is checked as soon as it is complete, so garbage is refused after 16 bytes.
    pub fn poll(&mut self) -> Result<Option<Msg>, WireError> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let h = &self.buf[..HEADER];
        let magic = u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        let version = u16::from_le_bytes([h[8], h[9]]);
        if version != WIRE_VERSION {
            return Err(WireError::Version {
                got: version,
                want: WIRE_VERSION,
            });
        }
        let kind_raw = u16::from_le_bytes([h[10], h[11]]);
        let kind = Kind::from_u16(kind_raw).ok_or(WireError::BadKind(kind_raw))?;
        let len = u32::from_le_bytes([h[12], h[13], h[14], h[15]]) as usize;
        if len > MAX_BODY {
            return Err(WireError::TooLong(len));
        }
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        let body: Vec<u8> = self.buf.drain(..HEADER + len).skip(HEADER).collect();
        Ok(Some(match kind {
            Kind::Connect => Msg::Connect(decode_meta(&body)?),
            Kind::Accept => Msg::Accept(decode_meta(&body)?),
            Kind::Ready if body.is_empty() => Msg::Ready,
            Kind::Ready => return Err(WireError::Malformed("ready with a body")),
            Kind::Reject => Msg::Reject(String::from_utf8_lossy(&body).into_owned()),
            Kind::Recover => Msg::Recover {
                epoch: decode_epoch(&body)?,
            },
            Kind::Resume => Msg::Resume {
                epoch: decode_epoch(&body)?,
            },
            Kind::ReceiverState => Msg::ReceiverState(decode_receiver_state(&body)?),
            Kind::Rebuilt => decode_rebuilt(&body)?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(i: u8) -> DevMeta {
        DevMeta {
            link_layer: 2,
            port: 1,
            lid: 0,
            mtu: 4096,
            gid: [7 + i; 16],
            gid_index: 1,
            mr_rkey: 42 + u32::from(i),
        }
    }

    fn meta(nqps: u16) -> QpMeta {
        QpMeta {
            qps_per_conn: nqps,
            split: true,
            path: QpPath { tc: 106, sl: 5 },
            devs: vec![dev(0)],
            mr_addr: 0x1234_5678_9abc,
            qpns: (0..u32::from(nqps)).map(|i| 100 + i).collect(),
            eces: Vec::new(),
            secret: [9; SECRET_SIZE],
        }
    }

    /// A virtual NIC of `ndevs` members, `qpc` QPs per member pair against a peer of `peer`.
    fn vmeta(qpc: u16, ndevs: u8, peer: u8) -> QpMeta {
        let n = u32::from(qpc) * u32::from(ndevs.max(peer));
        QpMeta {
            qps_per_conn: qpc,
            devs: (0..ndevs).map(dev).collect(),
            qpns: (0..n).map(|i| 100 + i).collect(),
            ..meta(1)
        }
    }

    fn feed_bytewise(bytes: &[u8]) -> Result<Option<Msg>, WireError> {
        let mut r = Reader::new();
        for b in bytes {
            assert!(r.wanted() > 0);
            r.push(std::slice::from_ref(b));
            if let Some(m) = r.poll()? {
                return Ok(Some(m));
            }
        }
        Ok(None)
    }

    #[test]
    fn every_message_round_trips_even_one_byte_at_a_time() {
        for msg in [
            Msg::Connect(meta(1)),
            Msg::Accept(meta(128)),
            Msg::Connect(vmeta(2, 8, 3)),
            Msg::Accept(vmeta(1, 2, 8)),
            Msg::Ready,
            Msg::Reject("NCCL_IB_QPS_PER_CONNECTION differs: 2 here, 4 there".into()),
        ] {
            assert_eq!(feed_bytewise(&encode(&msg)), Ok(Some(msg.clone())));
        }
    }

    fn state() -> ReceiverState {
        ReceiverState {
            epoch: 3,
            next_seq: 70,
            outstanding: vec![
                GroupArrivals {
                    seq: 40,
                    arrived: 0,
                },
                GroupArrivals {
                    seq: 69,
                    arrived: (1 << 127) | 5,
                },
            ],
        }
    }

    #[test]
    fn every_recovery_message_round_trips_even_one_byte_at_a_time() {
        let full = ReceiverState {
            epoch: u32::MAX,
            next_seq: u64::MAX,
            outstanding: (0..SLOTS as u64)
                .map(|i| GroupArrivals {
                    seq: u64::MAX - SLOTS as u64 + i,
                    arrived: u128::MAX >> i,
                })
                .collect(),
        };
        for msg in [
            Msg::Recover { epoch: 1 },
            Msg::ReceiverState(state()),
            Msg::ReceiverState(full),
            Msg::ReceiverState(ReceiverState {
                epoch: 1,
                next_seq: 0,
                outstanding: vec![],
            }),
            Msg::Rebuilt {
                epoch: 2,
                qpns: (0..MAX_QPS as u32).collect(),
                down: 0b1010_0000,
            },
            Msg::Resume { epoch: 7 },
        ] {
            assert_eq!(feed_bytewise(&encode(&msg)), Ok(Some(msg.clone())));
        }
    }

    #[test]
    fn ece_entries_travel_per_qp_or_not_at_all() {
        let e = Ece {
            vendor_id: 0x02c9,
            options: 0x3000_0000,
            comp_mask: 1,
        };
        let mut m = vmeta(2, 2, 1);
        m.eces = vec![Some(e), None, Some(e), Some(Ece::default())];
        let msg = Msg::Accept(m.clone());
        let bytes = encode(&msg);
        assert_eq!(feed_bytewise(&bytes), Ok(Some(msg)));
        assert_eq!(
            bytes.len(),
            encode(&Msg::Accept(QpMeta {
                eces: Vec::new(),
                ..m.clone()
            }))
            .len()
                + 4 * ECE_BYTES
        );
        m.eces.pop();
        assert!(matches!(
            feed_bytewise(&encode(&Msg::Accept(m))),
            Err(WireError::Malformed(_))
        ));
    }

    #[test]
    fn the_handshake_messages_keep_their_bytes() {
        // Kinds 1 to 4 and the header are what peers of this wire version speak (version 4:
        // the traffic class and service level after the device count; version 5: the ECE
        // entries after the QP numbers).
        assert_eq!(
            encode(&Msg::Ready),
            [&MAGIC.to_le_bytes()[..], &[5, 0, 3, 0, 0, 0, 0, 0]].concat()
        );
        let r = encode(&Msg::Reject("no".into()));
        assert_eq!((r[10], r[12], &r[16..]), (4, 2, &b"no"[..]));
        let c = encode(&Msg::Connect(meta(1)));
        assert_eq!(
            (c[10], c.len()),
            (1, HEADER + 30 + DEV_META_BYTES + 4 + 4 + 4)
        );
        assert_eq!(&c[16..32], &[9; SECRET_SIZE]);
        // qps_per_conn, split, device count, traffic class, service level.
        assert_eq!(&c[32..38], &[1, 0, 1, 1, 106, 5]);
    }

    #[test]
    fn the_traffic_class_and_service_level_travel_in_connect_and_accept() {
        for path in [
            QpPath { tc: 0, sl: 0 },
            QpPath { tc: 255, sl: 15 },
            QpPath { tc: 96, sl: 0 },
        ] {
            for msg in [
                Msg::Connect(QpMeta { path, ..meta(1) }),
                Msg::Accept(QpMeta {
                    path,
                    ..vmeta(2, 2, 1)
                }),
            ] {
                let got = feed_bytewise(&encode(&msg));
                assert_eq!(got, Ok(Some(msg.clone())));
            }
        }
    }

    #[test]
    fn a_service_level_above_fifteen_is_malformed() {
        let mut c = encode(&Msg::Connect(meta(1)));
        c[37] = 16;
        assert_eq!(
            feed_bytewise(&c),
            Err(WireError::Malformed("service level above 15"))
        );
        c[37] = 15;
        assert!(matches!(feed_bytewise(&c), Ok(Some(Msg::Connect(_)))));
    }

    #[test]
    fn a_malformed_recovery_message_is_refused() {
        let mut b = encode(&Msg::Recover { epoch: 1 });
        b.push(0);
        b[12] = 5;
        assert_eq!(
            feed_bytewise(&b),
            Err(WireError::Malformed("trailing bytes"))
        );
        let mut st = state();
        st.outstanding.reverse();
        assert!(matches!(
            feed_bytewise(&encode(&Msg::ReceiverState(st))),
            Err(WireError::Malformed(_))
        ));
        let mut st = state();
        st.outstanding[0].seq = 70 - SLOTS as u64 - 1;
        assert!(
            matches!(
                feed_bytewise(&encode(&Msg::ReceiverState(st))),
                Err(WireError::Malformed(_))
            ),
            "a group older than the last 32 posted cannot be outstanding"
        );
        assert!(matches!(
            feed_bytewise(&encode(&Msg::Rebuilt {
                epoch: 1,
                down: 0,
                qpns: vec![]
            })),
            Err(WireError::Malformed(_))
        ));
    }

    #[test]
    fn garbage_is_refused_after_the_header() {
        let junk = [0x41u8; 64];
        let mut r = Reader::new();
        r.push(&junk[..HEADER]);
        assert!(matches!(r.poll(), Err(WireError::BadMagic(_))));
        // An HTTP request, say, is refused too.
        let mut r = Reader::new();
        r.push(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(matches!(r.poll(), Err(WireError::BadMagic(_))));
    }

    #[test]
    fn version_kind_and_length_are_checked() {
        let mut b = encode(&Msg::Ready);
        b[8] = 1;
        assert_eq!(
            feed_bytewise(&b),
            Err(WireError::Version {
                got: 1,
                want: WIRE_VERSION
            })
        );
        let mut b = encode(&Msg::Ready);
        b[10] = 99;
        assert_eq!(feed_bytewise(&b), Err(WireError::BadKind(99)));
        let mut b = encode(&Msg::Ready);
        b[12..16].copy_from_slice(&(1u32 << 30).to_le_bytes());
        assert!(matches!(feed_bytewise(&b), Err(WireError::TooLong(_))));
    }

    #[test]
    fn inconsistent_meta_is_malformed() {
        let mut m = meta(2);
        m.qpns.pop();
        let b = encode(&Msg::Connect(m));
        assert!(matches!(feed_bytewise(&b), Err(WireError::Malformed(_))));
        // More members than QPs, or a QP count that is no multiple of the QPs per pair.
        assert!(matches!(
            feed_bytewise(&encode(&Msg::Connect(QpMeta {
                devs: vec![dev(0), dev(1), dev(2)],
                ..meta(2)
            }))),
            Err(WireError::Malformed(_))
        ));
        let mut m = vmeta(3, 2, 2);
        m.qpns.pop();
        assert!(matches!(
            feed_bytewise(&encode(&Msg::Connect(m))),
            Err(WireError::Malformed(_))
        ));
        let mut b = encode(&Msg::Connect(meta(1)));
        b.truncate(b.len() - 2);
        let len = (b.len() - HEADER) as u32;
        b[12..16].copy_from_slice(&len.to_le_bytes());
        assert!(matches!(feed_bytewise(&b), Err(WireError::Malformed(_))));
    }
}
