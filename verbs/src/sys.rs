//! Hand-written `repr(C)` definitions of the libibverbs types the plugin touches.
//!
//! Written from the documented verbs ABI (rdma-core's `struct ibv_*`, stable since the 1.1 ABI);
//! `tests/layout.rs` compiles a C program against the system `<infiniband/verbs.h>` and checks
//! every size and field offset here against it. Values the provider writes (work-completion status
//! and opcode, port state, ...) are plain integers, never Rust enums, so an unexpected value from a
//! provider can never be undefined behaviour.
#![allow(non_camel_case_types, missing_docs)]

use core::ffi::{c_char, c_int, c_uint, c_void};

/// Opaque `struct ibv_device`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_device {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_comp_channel {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_srq`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_srq {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_ah`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_ah {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_mw`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mw {
    _opaque: [u8; 0],
}

pub type PostSendOp = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int;
pub type PostRecvOp = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int;
pub type PollCqOp =
    unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int;
pub type ReqNotifyCqOp = unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int;
type AnyOp = Option<unsafe extern "C" fn()>;

/// `struct ibv_context_ops`: 32 function pointers. Only the data-path entries are typed; the rest
/// are compat slots the plugin never calls.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_context_ops {
    _compat_head: [AnyOp; 11],
    pub poll_cq: Option<PollCqOp>,
    pub req_notify_cq: Option<ReqNotifyCqOp>,
    _compat_mid: [AnyOp; 12],
    pub post_send: Option<PostSendOp>,
    pub post_recv: Option<PostRecvOp>,
    _compat_tail: [AnyOp; 5],
}

/// `struct ibv_context` (only the prefix the plugin reads is named; the tail is opaque).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    _mutex: libc::pthread_mutex_t,
    _abi_compat: *mut c_void,
}

#[repr(C)]
#[derive(Debug)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    _mutex: libc::pthread_mutex_t,
    _cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_uint,
    pub qp_type: c_uint,
    _mutex: libc::pthread_mutex_t,
    _cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `union ibv_gid`: 16 raw bytes in network order. The C union also holds two `u64`s, hence the
/// 8-byte alignment (which makes `ibv_qp_attr` 144 bytes, not 140).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_uint,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr`. The exported `ibv_query_port@IBVERBS_1.1` fills the compat prefix (up
/// to `flags`); callers zero the struct first. Trailing room is reserved for newer headers.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_port_attr {
    pub state: c_uint,
    pub max_mtu: c_uint,
    pub active_mtu: c_uint,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
    pub _reserved: [u32; 4],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: c_uint,
    pub cur_qp_state: c_uint,
    pub path_mtu: c_uint,
    pub path_mig_state: c_uint,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_rdma_info {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`: the RDMA member is named, the atomic/UD members only
/// give it its size (32 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_rdma_info,
    _atomic: [u64; 4],
}

impl core::fmt::Debug for ibv_send_wr_wr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ibv_send_wr_wr { .. }")
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_uint,
    /// Immediate data, in network byte order.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    pub qp_type_xrc_remote_srqn: u32,
    /// The bind_mw / tso union (unused here).
    pub _tail: [u64; 6],
}

impl Default for ibv_send_wr {
    fn default() -> Self {
        Self {
            wr_id: 0,
            next: core::ptr::null_mut(),
            sg_list: core::ptr::null_mut(),
            num_sge: 0,
            opcode: 0,
            send_flags: 0,
            imm_data: 0,
            wr: ibv_send_wr_wr { _atomic: [0; 4] },
            qp_type_xrc_remote_srqn: 0,
            _tail: [0; 6],
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

impl Default for ibv_recv_wr {
    fn default() -> Self {
        Self {
            wr_id: 0,
            next: core::ptr::null_mut(),
            sg_list: core::ptr::null_mut(),
            num_sge: 0,
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_uint,
    pub opcode: c_uint,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Immediate data, in network byte order (valid when `wc_flags & IBV_WC_WITH_IMM`).
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_ece` (rdma-core 31+): a QP's enhanced connection establishment options.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `struct ibv_gid_entry` (rdma-core 32+): one entry of `_ibv_query_gid_table`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `IBV_GID_TYPE_IB` (0), `IBV_GID_TYPE_ROCE_V1` (1), `IBV_GID_TYPE_ROCE_V2` (2).
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

impl core::fmt::Debug for ibv_gid_entry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "ibv_gid_entry {{ port {} index {} type {} ifindex {} }}",
            self.port_num, self.gid_index, self.gid_type, self.ndev_ifindex
        )
    }
}

pub const IBV_GID_TYPE_IB: u32 = 0;
pub const IBV_GID_TYPE_ROCE_V1: u32 = 1;
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;

/// `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: *mut c_void,
    pub event_type: c_uint,
}

impl core::fmt::Debug for ibv_async_event {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ibv_async_event {{ event_type: {} }}", self.event_type)
    }
}

// `enum ibv_event_type`.
pub const IBV_EVENT_CQ_ERR: c_uint = 0;
pub const IBV_EVENT_QP_FATAL: c_uint = 1;
pub const IBV_EVENT_QP_REQ_ERR: c_uint = 2;
pub const IBV_EVENT_QP_ACCESS_ERR: c_uint = 3;
pub const IBV_EVENT_COMM_EST: c_uint = 4;
pub const IBV_EVENT_SQ_DRAINED: c_uint = 5;
pub const IBV_EVENT_PATH_MIG: c_uint = 6;
pub const IBV_EVENT_PATH_MIG_ERR: c_uint = 7;
pub const IBV_EVENT_DEVICE_FATAL: c_uint = 8;
pub const IBV_EVENT_PORT_ACTIVE: c_uint = 9;
pub const IBV_EVENT_PORT_ERR: c_uint = 10;
pub const IBV_EVENT_LID_CHANGE: c_uint = 11;
pub const IBV_EVENT_PKEY_CHANGE: c_uint = 12;
pub const IBV_EVENT_SM_CHANGE: c_uint = 13;
pub const IBV_EVENT_SRQ_ERR: c_uint = 14;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: c_uint = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: c_uint = 16;
pub const IBV_EVENT_CLIENT_REREGISTER: c_uint = 17;
pub const IBV_EVENT_GID_CHANGE: c_uint = 18;
pub const IBV_EVENT_WQ_FATAL: c_uint = 19;

/// The name `ibv_event_type_str` would give, without calling into the library.
pub fn event_type_name(t: c_uint) -> &'static str {
    match t {
        IBV_EVENT_CQ_ERR => "IBV_EVENT_CQ_ERR",
        IBV_EVENT_QP_FATAL => "IBV_EVENT_QP_FATAL",
        IBV_EVENT_QP_REQ_ERR => "IBV_EVENT_QP_REQ_ERR",
        IBV_EVENT_QP_ACCESS_ERR => "IBV_EVENT_QP_ACCESS_ERR",
        IBV_EVENT_COMM_EST => "IBV_EVENT_COMM_EST",
        IBV_EVENT_SQ_DRAINED => "IBV_EVENT_SQ_DRAINED",
        IBV_EVENT_PATH_MIG => "IBV_EVENT_PATH_MIG",
        IBV_EVENT_PATH_MIG_ERR => "IBV_EVENT_PATH_MIG_ERR",
        IBV_EVENT_DEVICE_FATAL => "IBV_EVENT_DEVICE_FATAL",
        IBV_EVENT_PORT_ACTIVE => "IBV_EVENT_PORT_ACTIVE",
        IBV_EVENT_PORT_ERR => "IBV_EVENT_PORT_ERR",
        IBV_EVENT_LID_CHANGE => "IBV_EVENT_LID_CHANGE",
        IBV_EVENT_PKEY_CHANGE => "IBV_EVENT_PKEY_CHANGE",
        IBV_EVENT_SM_CHANGE => "IBV_EVENT_SM_CHANGE",
        IBV_EVENT_SRQ_ERR => "IBV_EVENT_SRQ_ERR",
        IBV_EVENT_SRQ_LIMIT_REACHED => "IBV_EVENT_SRQ_LIMIT_REACHED",
        IBV_EVENT_QP_LAST_WQE_REACHED => "IBV_EVENT_QP_LAST_WQE_REACHED",
        IBV_EVENT_CLIENT_REREGISTER => "IBV_EVENT_CLIENT_REREGISTER",
        IBV_EVENT_GID_CHANGE => "IBV_EVENT_GID_CHANGE",
        IBV_EVENT_WQ_FATAL => "IBV_EVENT_WQ_FATAL",
        _ => "unknown event",
    }
}

// Constants (values of the verbs ABI enums and flags).
pub const IBV_ACCESS_LOCAL_WRITE: c_uint = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_uint = 2;
pub const IBV_ACCESS_REMOTE_READ: c_uint = 4;
pub const IBV_ACCESS_REMOTE_ATOMIC: c_uint = 8;
pub const IBV_ACCESS_RELAXED_ORDERING: c_uint = 1 << 20;

pub const IBV_QPT_RC: c_uint = 2;

pub const IBV_QPS_RESET: c_uint = 0;
pub const IBV_QPS_INIT: c_uint = 1;
pub const IBV_QPS_RTR: c_uint = 2;
/// `ibv_port_attr.flags`: the port requires a global route header (`IBV_QPF_GRH_REQUIRED`).
pub const IBV_QPF_GRH_REQUIRED: u8 = 1;
pub const IBV_QPS_RTS: c_uint = 3;
pub const IBV_QPS_ERR: c_uint = 6;

pub const IBV_QP_STATE: c_int = 1 << 0;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;

pub const IBV_WR_RDMA_WRITE: c_uint = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
pub const IBV_WR_SEND: c_uint = 2;
pub const IBV_WR_RDMA_READ: c_uint = 4;

pub const IBV_SEND_FENCE: c_uint = 1;
pub const IBV_SEND_SIGNALED: c_uint = 2;
pub const IBV_SEND_INLINE: c_uint = 8;

pub const IBV_WC_SUCCESS: c_uint = 0;
pub const IBV_WC_RECV_RDMA_WITH_IMM: c_uint = 129;
pub const IBV_WC_WITH_IMM: c_uint = 2;

pub const IBV_PORT_ACTIVE: c_uint = 4;
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// `enum ibv_mtu` code (1..=5) to bytes.
pub fn mtu_bytes(code: c_uint) -> Option<u32> {
    match code {
        1 => Some(256),
        2 => Some(512),
        3 => Some(1024),
        4 => Some(2048),
        5 => Some(4096),
        _ => None,
    }
}

/// Text of a work-completion status code (the `ibv_wc_status_str` table), for logs.
pub fn wc_status_name(status: c_uint) -> &'static str {
    match status {
        0 => "success",
        1 => "local length error",
        2 => "local QP operation error",
        3 => "local EE context operation error",
        4 => "local protection error",
        5 => "WR flushed",
        6 => "memory management operation error",
        7 => "bad response error",
        8 => "local access error",
        9 => "remote invalid request error",
        10 => "remote access error",
        11 => "remote operation error",
        12 => "transport retry counter exceeded",
        13 => "RNR retry counter exceeded",
        14 => "local RDD violation error",
        15 => "remote invalid RD request",
        16 => "aborted error",
        17 => "invalid EE context number",
        18 => "invalid EE context state",
        19 => "fatal error",
        20 => "response timeout error",
        21 => "general error",
        22 => "TM error",
        23 => "TM rendezvous pending",
        _ => "unknown status",
    }
}
