//! The catalogue of every variable NCCL 2.30's IB transport reads (`NCCL_IB_*`, with
//! `NCCL_GDR_FLUSH_DISABLE` and `NCCL_DMABUF_ENABLE`), each with NCCL's default and how this
//! plugin stands to it: the same meaning, a different one (how, why), or none (why). The configuration page's (`docs/configuration.md`)
//! table, the doctor's configuration section and the INFO lines at `init` all come from here.
//!
//! A variable the `settings!` table reads has its value in the summary; one it does not read is
//! [`Standing::NotApplicable`] and is said once at INFO when set ([`super::Config::not_applicable`]),
//! so that no set variable is ever ignored silently.

use super::VARIABLES;

/// How this plugin stands to one of NCCL's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Read, with NCCL's meaning and default.
    Same,
    /// Read, with a meaning or default that differs from NCCL's: how and why.
    Differs(&'static str),
    /// Not read as a setting (the feature is NCCL's own or needs what this plugin does not
    /// have): why. Said once at INFO when set.
    NotApplicable(&'static str),
}

impl Standing {
    /// `same`, `differs` or `does not apply`.
    pub fn word(&self) -> &'static str {
        match self {
            Standing::Same => "same",
            Standing::Differs(_) => "differs",
            Standing::NotApplicable(_) => "does not apply",
        }
    }

    /// How or why (empty for [`Standing::Same`]).
    pub fn note(&self) -> &'static str {
        match self {
            Standing::Same => "",
            Standing::Differs(s) | Standing::NotApplicable(s) => s,
        }
    }
}

/// One variable NCCL 2.30 reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcclVariable {
    pub name: &'static str,
    /// NCCL's default, as NCCL documents or declares it.
    pub nccl_default: &'static str,
    pub standing: Standing,
}

const fn same(name: &'static str, nccl_default: &'static str) -> NcclVariable {
    NcclVariable {
        name,
        nccl_default,
        standing: Standing::Same,
    }
}

const fn differs(
    name: &'static str,
    nccl_default: &'static str,
    how: &'static str,
) -> NcclVariable {
    NcclVariable {
        name,
        nccl_default,
        standing: Standing::Differs(how),
    }
}

const fn not_applicable(
    name: &'static str,
    nccl_default: &'static str,
    why: &'static str,
) -> NcclVariable {
    NcclVariable {
        name,
        nccl_default,
        standing: Standing::NotApplicable(why),
    }
}

const NO_PROBES: &str = "no RDMA READ probes here (see NCCL_IB_RESILIENCY_PORT_FAILOVER); a recovery is bounded by FERRO_RECOVERY_BUDGET_S and NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX";
const NO_ALIVE: &str = "NCCL's port recovery sends alive messages over its own QPs; here the peers agree over the out-of-band connection, and a port is used again once it reports itself ACTIVE; a recovery is bounded by FERRO_RECOVERY_BUDGET_S";
const MLX5DV: &str = "needs mlx5 direct verbs (libmlx5's mlx5dv_* calls), which this plugin neither links nor loads: it works through plain libibverbs on every provider";

/// Every variable NCCL 2.30's IB transport reads (from its `net_ib` sources and `ibvwrap`, as of
/// 2.30.7), in the configuration page's order.
pub const NCCL_2_30: &[NcclVariable] = &[
    same("NCCL_IB_DISABLE", "0"),
    same("NCCL_IB_HCA", "unset (every device)"),
    same("NCCL_IB_DEVICE_PCI_ORDER", "1"),
    same("NCCL_IB_MERGE_VFS", "1"),
    same("NCCL_IB_MERGE_NICS", "1"),
    differs(
        "NCCL_IB_WARN_RAIL_LOCAL",
        "0",
        "set, an INFO line at each connection whose peer device has another member count than this side's (QPs of several members then share one peer member); NCCL compares the two sides' physical device numbers, which this plugin's handshake does not carry (members are paired by position)",
    ),
    same("NCCL_IB_QUERY_PORT_SPEED", "1"),
    same("NCCL_IB_GID_INDEX", "-1"),
    same("NCCL_IB_ADDR_FAMILY", "AF_INET"),
    same("NCCL_IB_ADDR_RANGE", "unset"),
    same("NCCL_IB_ROCE_VERSION_NUM", "2"),
    same("NCCL_IB_ROUTABLE_FLID_GID_INDEX", "1"),
    differs(
        "NCCL_IB_SUBNET_AWARE_ROUTING",
        "0",
        "same choice on the connecting side (the listener's first two RoCE GIDs travel in the handle); the accepting side only switches to a device with as many members as the listener's (its QP layout was agreed for that count)",
    ),
    same("NCCL_IB_SUBNET_PREFIX_LEN", "24"),
    same("NCCL_IB_PKEY", "0"),
    same("NCCL_IB_TIMEOUT", "20"),
    same("NCCL_IB_RETRY_CNT", "7"),
    same("NCCL_IB_TC", "-1"),
    same("NCCL_IB_SL", "-1"),
    same("NCCL_IB_FIFO_TC", "-1"),
    differs(
        "NCCL_IB_QPS_PER_CONNECTION",
        "1",
        "must be equal on both sides: a mismatch fails the handshake naming both values (NCCL uses the larger of the two)",
    ),
    same("NCCL_IB_SPLIT_DATA_ON_QPS", "0"),
    differs(
        "NCCL_IB_USE_INLINE",
        "0",
        "also inlines single-buffer sends of 1 to 64 bytes from host memory (NCCL inlines only the clear-to-send)",
    ),
    same("NCCL_IB_ADAPTIVE_ROUTING", "1 on InfiniBand, 0 on RoCE"),
    same("NCCL_IB_AR_THRESHOLD", "8192"),
    differs(
        "NCCL_IB_PCI_RELAXED_ORDERING",
        "2",
        "1 and 2 both request relaxed ordering only through ibv_reg_mr_iova2 (NCCL's 1 asks for it without checking)",
    ),
    same("NCCL_IB_ECE_ENABLE", "1"),
    differs(
        "NCCL_IB_MQP_RETRY_ALL",
        "0",
        "same choice of failures to retry (ETIMEDOUT only, or every one), applied to the changes that connect a QP (to RTR and to RTS) at setup; connect and accept never sleep: they answer \"not yet\" until the retry is due (NCCL sleeps inside the call)",
    ),
    differs(
        "NCCL_IB_MQP_RETRY_CNT",
        "34",
        "same count, for the changes that connect a QP at setup (see NCCL_IB_MQP_RETRY_ALL); the handshake's 120 s without progress still bounds the whole setup",
    ),
    differs(
        "NCCL_IB_MQP_RETRY_SLEEP_MSEC",
        "100",
        "same wait (this many ms x attempt), spent between connect or accept calls instead of sleeping inside one",
    ),
    same("NCCL_IB_RETURN_ASYNC_EVENTS", "1"),
    not_applicable("NCCL_IB_DATA_DIRECT", "1", MLX5DV),
    not_applicable("NCCL_IB_OOO_RQ", "0", MLX5DV),
    not_applicable(
        "NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME",
        "-2 (NCCL decides)",
        "this plugin has one way to match a send to a receive (the receiver's clear-to-send write names its buffers, the sender's write with immediate completes them), on every device; NCCL's alternative scheme is not implemented",
    ),
    not_applicable(
        "NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS",
        "-2 (NCCL decides)",
        "receive work requests are posted by each irecv here (on demand, NCCL's default), on every comm; pre-posting is not implemented",
    ),
    differs(
        "NCCL_IB_RESILIENCY_PORT_RECOVERY",
        "0",
        "recovery in place is on by default here (NCCL: off); set to 0, it is off unless FERRO_RECOVERY_BUDGET_S is set; 1 changes nothing",
    ),
    differs(
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY",
        "200",
        "unset here means no wait beyond the port being ACTIVE (NCCL: 200 ms)",
    ),
    differs(
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX",
        "5",
        "unset here means only FERRO_RECOVERY_BUDGET_S bounds a recovery (NCCL: 5)",
    ),
    not_applicable(
        "NCCL_IB_RESILIENCY_PORT_FAILOVER",
        "0",
        "NCCL's failover probes the receiver's completion records with RDMA READs over another member of a fused NIC; recovery in place here agrees on what was delivered over the out-of-band connection instead (FERRO_RECOVERY_BUDGET_S), for every comm",
    ),
    not_applicable(
        "NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS",
        "1",
        NO_PROBES,
    ),
    not_applicable(
        "NCCL_IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY",
        "10",
        NO_PROBES,
    ),
    not_applicable(
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL",
        "500",
        NO_ALIVE,
    ),
    not_applicable(
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE",
        "5",
        NO_ALIVE,
    ),
    not_applicable(
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE",
        "5",
        NO_ALIVE,
    ),
    not_applicable(
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT",
        "4000",
        NO_ALIVE,
    ),
    not_applicable(
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT",
        "5000",
        NO_ALIVE,
    ),
    same("NCCL_GDR_FLUSH_DISABLE", "0"),
    same("NCCL_DMABUF_ENABLE", "1"),
];

/// The catalogue entry of `name`, if NCCL 2.30 reads it.
pub fn lookup(name: &str) -> Option<&'static NcclVariable> {
    NCCL_2_30.iter().find(|v| v.name == name)
}

/// One row of the doctor's table: a variable of NCCL's, its value here and how this plugin
/// stands to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariableRow {
    pub name: &'static str,
    /// The effective value (from the summary) for a variable this plugin reads; the value as
    /// set, or `unset`, for one it does not.
    pub value: String,
    pub nccl_default: &'static str,
    pub standing: Standing,
}

/// The doctor's table: every variable of [`NCCL_2_30`], its value taken from `summary` (the
/// configuration's one-line summary) when this plugin reads it, else from `get`.
pub fn rows(summary: &str, get: &dyn Fn(&str) -> Option<String>) -> Vec<VariableRow> {
    NCCL_2_30
        .iter()
        .map(|v| {
            let read = VARIABLES.contains(&v.name);
            let value = if read {
                let key = format!("{}=", v.name);
                summary
                    .split(' ')
                    .find_map(|part| part.strip_prefix(key.as_str()))
                    .unwrap_or("unset")
                    .to_string()
            } else {
                get(v.name)
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "unset".to_string())
            };
            VariableRow {
                name: v.name,
                value,
                nccl_default: v.nccl_default,
                standing: v.standing,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_is_either_read_or_said_not_to_apply_never_both() {
        for v in NCCL_2_30 {
            let read = VARIABLES.contains(&v.name);
            let na = matches!(v.standing, Standing::NotApplicable(_));
            assert!(read != na, "{}: read={read}, not applicable={na}", v.name);
        }
    }

    #[test]
    fn every_nccl_ib_variable_the_configuration_reads_is_in_the_catalogue() {
        for name in VARIABLES.iter().filter(|n| n.starts_with("NCCL_IB_")) {
            assert!(lookup(name).is_some(), "{name} is read but not catalogued");
        }
        for name in ["NCCL_GDR_FLUSH_DISABLE", "NCCL_DMABUF_ENABLE"] {
            assert!(lookup(name).is_some(), "{name}");
        }
    }

    #[test]
    fn no_variable_is_catalogued_twice() {
        for (i, v) in NCCL_2_30.iter().enumerate() {
            assert!(
                !NCCL_2_30[i + 1..].iter().any(|w| w.name == v.name),
                "{} twice",
                v.name
            );
        }
    }

    #[test]
    fn the_configuration_page_has_one_row_for_every_catalogued_variable() {
        let readme = include_str!("../../../docs/configuration.md");
        for v in NCCL_2_30 {
            let row = format!("| `{}` |", v.name);
            assert_eq!(
                readme.matches(&row).count(),
                1,
                "docs/configuration.md row for {}",
                v.name
            );
        }
    }

    #[test]
    fn rows_show_read_values_from_the_summary_and_others_as_set() {
        let summary = "NCCL_IB_DISABLE=0 NCCL_IB_TIMEOUT=18";
        let get = |n: &str| (n == "NCCL_IB_OOO_RQ").then(|| " 1 ".to_string());
        let rows = rows(summary, &get);
        assert_eq!(rows.len(), NCCL_2_30.len());
        let row = |n: &str| rows.iter().find(|r| r.name == n).unwrap();
        assert_eq!(row("NCCL_IB_TIMEOUT").value, "18");
        assert_eq!(row("NCCL_IB_OOO_RQ").value, "1");
        assert_eq!(row("NCCL_IB_OOO_RQ").standing.word(), "does not apply");
        assert_eq!(row("NCCL_IB_DATA_DIRECT").value, "unset");
    }
}
