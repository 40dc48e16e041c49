//! Link speed as `ibv_query_port` encodes it (`active_speed`, `active_width`), in Mbps and
//! names.

/// Per-lane speed in Mbps for an `ibv_port_attr::active_speed` code.
pub fn lane_speed_mbps(active_speed: u8) -> Option<u32> {
    match active_speed {
        1 => Some(2_500),     // SDR
        2 => Some(5_000),     // DDR
        4 => Some(10_000),    // QDR
        8 => Some(10_000),    // FDR10
        16 => Some(14_000),   // FDR
        32 => Some(25_000),   // EDR
        64 => Some(50_000),   // HDR
        128 => Some(100_000), // NDR
        _ => None,
    }
}

/// Name of an `active_speed` code (`SDR`, ..., `NDR`), `unknown` otherwise.
pub fn speed_name(active_speed: u8) -> &'static str {
    match active_speed {
        1 => "SDR",
        2 => "DDR",
        4 => "QDR",
        8 => "FDR10",
        16 => "FDR",
        32 => "EDR",
        64 => "HDR",
        128 => "NDR",
        _ => "unknown",
    }
}

/// Lane count of an `ibv_port_attr::active_width` code (1→1x, 2→4x, 4→8x, 8→12x, 16→2x).
pub fn width_lanes(active_width: u8) -> Option<u32> {
    match active_width {
        1 => Some(1),
        2 => Some(4),
        4 => Some(8),
        8 => Some(12),
        16 => Some(2),
        _ => None,
    }
}

/// Port speed in Mbps from `active_speed` × `active_width`; `None` if either code is unknown.
pub fn ib_speed_mbps(active_speed: u8, active_width: u8) -> Option<u32> {
    lane_speed_mbps(active_speed)?.checked_mul(width_lanes(active_width)?)
}
