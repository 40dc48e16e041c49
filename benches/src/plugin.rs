//! The plugin as the benchmark loads it (through the NCCL stand-in, `ferro_nccl_standin::Net`,
//! the v8 table as NCCL 2.20-2.23 takes it) and the devices it offers; failed plugin calls
//! become errors naming the call.

use crate::error::{Error, Result};
use core::ffi::c_int;
use ferro_ffi::{AbiVersion, NCCL_PTR_HOST};
use ferro_nccl_standin::{NcclExt as _, Net};
use std::path::Path;

/// What `getProperties` says about a device (the fields the benchmark reports).
#[derive(Debug, Clone)]
pub(crate) struct DevProps {
    pub(crate) index: c_int,
    pub(crate) name: String,
    pub(crate) speed_mbps: c_int,
    pub(crate) ptr_support: c_int,
    pub(crate) max_recvs: c_int,
}

/// `dlopen(path, RTLD_NOW | RTLD_LOCAL)` and `dlsym("ncclNetPlugin_v8")`, as NCCL does; the
/// library is never closed (the table's code lives in it).
pub(crate) fn load(path: &Path) -> Result<Net> {
    Net::load_version(path, AbiVersion::V8).map_err(Error::new)
}

/// The table's name, or `(unnamed)`.
pub(crate) fn name(net: &Net) -> String {
    net.name().unwrap_or_else(|| "(unnamed)".to_string())
}

/// `init(NULL)` for Ferro: no logger (it then writes its warnings to stderr). Another plugin
/// (one without Ferro's `ferroNetStats_v1`, e.g. NCCL's IB transport as a plugin) gets the
/// stand-in's logger, as NCCL always passes one and such a plugin calls it unchecked.
pub(crate) fn init(net: &Net) -> Result<()> {
    let logger = if ferro_nccl_standin::loader::stats_fn(net.path()).is_some() {
        None
    } else {
        ferro_nccl_standin::logger::nccl_logger()
    };
    Ok(net.init_with(logger).call("init")?)
}

fn properties(net: &Net, dev: c_int) -> Result<DevProps> {
    let p = net.get_properties(dev).call("getProperties")?;
    Ok(DevProps {
        index: dev,
        name: p.name.unwrap_or_else(|| "?".to_string()),
        speed_mbps: p.speed,
        ptr_support: p.ptr_support,
        max_recvs: p.max_recvs,
    })
}

/// All devices the plugin offers.
pub(crate) fn devices(net: &Net) -> Result<Vec<DevProps>> {
    (0..net.devices().call("devices")?)
        .map(|d| properties(net, d))
        .collect()
}

/// The device called `name`, which must take host memory.
pub(crate) fn find_device(net: &Net, name: &str) -> Result<DevProps> {
    let devs = devices(net)?;
    if let Some(d) = devs.iter().find(|d| d.name == name) {
        if d.ptr_support & NCCL_PTR_HOST == 0 {
            return Err(Error::new(format!(
                "device {name} does not support host memory"
            )));
        }
        return Ok(d.clone());
    }
    let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
    Err(Error::new(format!(
        "device {name} is not among the plugin's devices ({})",
        if names.is_empty() {
            "it found none".to_string()
        } else {
            names.join(", ")
        }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferro_nccl_standin::Handle;

    #[test]
    fn handle_hex_round_trip() {
        let mut h = Handle::zeroed();
        for (i, b) in h.0.iter_mut().enumerate() {
            *b = (i * 37) as u8;
        }
        let s = h.to_hex();
        assert_eq!(s.len(), 256);
        assert_eq!(Handle::from_hex(&format!(" {s}\n")).unwrap().0, h.0);
        assert!(Handle::from_hex("abcd").is_err());
        assert!(Handle::from_hex(&"zz".repeat(128)).is_err());
    }

    #[test]
    fn missing_library_is_a_clean_error() {
        let e = load(Path::new("/nonexistent/libnope.so")).unwrap_err();
        assert!(e.to_string().contains("dlopen"), "{e}");
    }
}
