//! The benchmark's view of the plugin: loaded and called through the shared client
//! (`ferro_nccl_standin::loader` and `ferro_nccl_standin::raw`, as the harness and the in-process tests do),
//! with comms, memory handles and requests carried in small `Copy` newtypes for the timed loops.
//! Every failed call becomes an error naming the call.

use crate::error::{Error, Result};
use core::ffi::{CStr, c_char, c_int, c_void};
use ferro_nccl_standin::raw;
use ferro_ffi::{
    FerroNetStatsFn, NCCL_NET_HANDLE_MAXSIZE, NCCL_PTR_HOST, ferroNetStats_v1_t, ncclNet_v8_t,
    ncclNetProperties_v8_t,
};
use std::path::{Path, PathBuf};

/// A listen handle as NCCL carries it between ranks.
pub(crate) type Handle = [u8; NCCL_NET_HANDLE_MAXSIZE];

/// A send or receive comm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Comm(*mut c_void);

/// A listen comm.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListenComm(*mut c_void);

/// A memory registration (`mhandle`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mr(*mut c_void);

/// An outstanding request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Req(*mut c_void);

/// What `getProperties` says about a device (the fields the benchmark reports).
#[derive(Debug, Clone)]
pub(crate) struct DevProps {
    pub(crate) index: c_int,
    pub(crate) name: String,
    pub(crate) speed_mbps: c_int,
    pub(crate) ptr_support: c_int,
    pub(crate) max_recvs: c_int,
}

/// The loaded plugin: the library handle (never closed: the table's code lives in it) and a copy
/// of its function table.
#[derive(Debug)]
pub(crate) struct Net {
    table: ncclNet_v8_t,
    /// The plugin's statistics function, when it has one.
    stats: Option<FerroNetStatsFn>,
    pub(crate) path: PathBuf,
    pub(crate) name: String,
}

/// A raw call's result with the call named in the error.
fn called<T>(r: raw::NetResult<T>, what: &str) -> Result<T> {
    r.map_err(|code| {
        Error::new(format!(
            "plugin call {what} failed with {code:?} (see the plugin's WARN lines above)"
        ))
    })
}

impl Net {
    /// `dlopen(path, RTLD_NOW | RTLD_LOCAL)` and `dlsym("ncclNetPlugin_v8")`, as NCCL does (the
    /// shared client's loader).
    pub(crate) fn load(path: &Path) -> Result<Net> {
        let table = *ferro_nccl_standin::loader::open_plugin(path).map_err(Error::new)?;
        let name = if table.name.is_null() {
            "(unnamed)".to_string()
        } else {
            // SAFETY: a non-NULL name is a static NUL-terminated string inside the library.
            unsafe { CStr::from_ptr(table.name) }
                .to_string_lossy()
                .into_owned()
        };
        Ok(Net {
            table,
            stats: ferro_nccl_standin::loader::stats_fn(path),
            path: path.to_path_buf(),
            name,
        })
    }

    /// `init(NULL)`: no logger (Rust cannot define a C variadic function); the plugin then
    /// writes its warnings to stderr.
    pub(crate) fn init(&self) -> Result<()> {
        called(raw::init(&self.table, None), "init")
    }

    /// The plugin's counters for `c` and its process's allocation count; `None` when the
    /// plugin does not export them.
    pub(crate) fn stats(&self, c: Comm) -> Result<Option<ferroNetStats_v1_t>> {
        let Some(f) = self.stats else {
            return Ok(None);
        };
        let mut out = ferroNetStats_v1_t::default();
        // SAFETY: c is a live comm of this plugin; out is a valid out-pointer.
        let r = unsafe { f(c.0, &mut out) };
        if r != ferro_ffi::ncclResult_t::Success {
            return Err(Error::new(format!("ferroNetStats_v1 failed with {r:?}")));
        }
        Ok(Some(out))
    }

    fn device_count(&self) -> Result<c_int> {
        called(raw::devices(&self.table), "devices")
    }

    fn properties(&self, dev: c_int) -> Result<DevProps> {
        // SAFETY: all-zero is a valid value of this plain C struct (NULL pointers, zero numbers).
        let mut p: ncclNetProperties_v8_t = unsafe { std::mem::zeroed() };
        called(
            raw::get_properties(&self.table, dev, &mut p),
            "getProperties",
        )?;
        let name = cstr_or(p.name, "?");
        Ok(DevProps {
            index: dev,
            name,
            speed_mbps: p.speed,
            ptr_support: p.ptrSupport,
            max_recvs: p.maxRecvs,
        })
    }

    /// All devices the plugin offers.
    pub(crate) fn devices(&self) -> Result<Vec<DevProps>> {
        (0..self.device_count()?)
            .map(|d| self.properties(d))
            .collect()
    }

    /// The device called `name`.
    pub(crate) fn find_device(&self, name: &str) -> Result<DevProps> {
        let devs = self.devices()?;
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

    pub(crate) fn listen(&self, dev: c_int) -> Result<(Handle, ListenComm)> {
        let mut h: Handle = [0; NCCL_NET_HANDLE_MAXSIZE];
        let l = called(raw::listen(&self.table, dev, &mut h), "listen")?;
        if l.is_null() {
            return Err(Error::new("listen returned a NULL listen comm"));
        }
        Ok((h, ListenComm(l)))
    }

    /// One non-blocking step of `connect`; `None` until the connection is ready.
    pub(crate) fn connect(&self, dev: c_int, h: &mut Handle) -> Result<Option<Comm>> {
        let (c, _) = called(raw::connect(&self.table, dev, h), "connect")?;
        Ok((!c.is_null()).then_some(Comm(c)))
    }

    /// One non-blocking step of `accept`; `None` until a connection is ready.
    pub(crate) fn accept(&self, l: ListenComm) -> Result<Option<Comm>> {
        // SAFETY: l came from listen.
        let (c, _) = called(unsafe { raw::accept(&self.table, l.0) }, "accept")?;
        Ok((!c.is_null()).then_some(Comm(c)))
    }

    /// Registers host memory with a comm.
    ///
    /// # Safety
    /// `[data, data + len)` must stay allocated until the registration is released with
    /// [`Net::dereg_mr`] (or the process ends).
    pub(crate) unsafe fn reg_mr(&self, c: Comm, data: *mut u8, len: usize) -> Result<Mr> {
        // SAFETY: c is a live comm; the caller keeps the memory alive.
        let m = unsafe { raw::reg_mr(&self.table, c.0, data.cast(), len, NCCL_PTR_HOST) };
        Ok(Mr(called(m, "regMr")?))
    }

    pub(crate) fn dereg_mr(&self, c: Comm, m: Mr) -> Result<()> {
        // SAFETY: m was registered with c and has no request in flight (caller's protocol).
        called(unsafe { raw::dereg_mr(&self.table, c.0, m.0) }, "deregMr")
    }

    /// `isend`; `None` when the plugin cannot take it yet (no matching receive posted).
    ///
    /// # Safety
    /// `[data, data + size)` must lie inside the memory registered as `m` and stay untouched
    /// until the request completes.
    pub(crate) unsafe fn isend(
        &self,
        c: Comm,
        data: *mut u8,
        size: usize,
        tag: c_int,
        m: Mr,
    ) -> Result<Option<Req>> {
        let size = c_int::try_from(size)
            .map_err(|_| Error::new(format!("message size {size} does not fit a C int")))?;
        // SAFETY: per this function's contract.
        let r = called(
            unsafe { raw::isend(&self.table, c.0, data.cast(), size, tag, m.0) },
            "isend",
        )?;
        Ok((!r.is_null()).then_some(Req(r)))
    }

    /// `irecv` of one buffer; `None` when the plugin cannot take it yet.
    ///
    /// # Safety
    /// `[data, data + size)` must lie inside the memory registered as `m` and stay unused
    /// until the request completes.
    pub(crate) unsafe fn irecv(
        &self,
        c: Comm,
        data: *mut u8,
        size: usize,
        tag: c_int,
        m: Mr,
    ) -> Result<Option<Req>> {
        let size = c_int::try_from(size)
            .map_err(|_| Error::new(format!("receive size {size} does not fit a C int")))?;
        let data: *mut c_void = data.cast();
        let mh = m.0;
        // SAFETY: arrays of n = 1 entries (the plugin copies them during the call); the buffer
        // per this function's contract.
        let r = called(
            unsafe {
                raw::irecv(
                    &self.table,
                    c.0,
                    &mut [data],
                    &mut [size],
                    &mut [tag],
                    &mut [mh],
                )
            },
            "irecv",
        )?;
        Ok((!r.is_null()).then_some(Req(r)))
    }

    /// `test`: `Some(size)` once the request is done (the request is then gone).
    pub(crate) fn test(&self, r: Req) -> Result<Option<usize>> {
        // The plugin writes one size per buffer of the request; ours have one buffer, the
        // spare room only guards against a plugin that writes more.
        let mut sizes: [c_int; 8] = [-1; 8];
        // SAFETY: r is an outstanding request; sizes has room for its buffers.
        let done = called(
            unsafe { raw::test(&self.table, r.0, sizes.as_mut_ptr()) },
            "test",
        )?;
        if done == 0 {
            return Ok(None);
        }
        usize::try_from(sizes[0])
            .map(Some)
            .map_err(|_| Error::new(format!("test reported size {}", sizes[0])))
    }

    pub(crate) fn close_send(&self, c: Comm) -> Result<()> {
        // SAFETY: c is a live send comm, not used afterwards.
        called(
            unsafe { raw::close(&self.table, raw::CommKind::Send, c.0) },
            "closeSend",
        )
    }

    pub(crate) fn close_recv(&self, c: Comm) -> Result<()> {
        // SAFETY: c is a live receive comm, not used afterwards.
        called(
            unsafe { raw::close(&self.table, raw::CommKind::Recv, c.0) },
            "closeRecv",
        )
    }

    pub(crate) fn close_listen(&self, l: ListenComm) -> Result<()> {
        // SAFETY: l is a live listen comm, not used afterwards.
        called(
            unsafe { raw::close(&self.table, raw::CommKind::Listen, l.0) },
            "closeListen",
        )
    }
}

fn cstr_or(p: *const c_char, dflt: &str) -> String {
    if p.is_null() {
        return dflt.to_string();
    }
    // SAFETY: the plugin returns NUL-terminated strings that live as long as the plugin.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Lower-case hex of a handle (the shared client's form).
pub(crate) fn handle_to_hex(h: &Handle) -> String {
    ferro_nccl_standin::Handle(*h).to_hex()
}

/// Parses 256 hex digits into a handle.
pub(crate) fn handle_from_hex(s: &str) -> Result<Handle> {
    ferro_nccl_standin::Handle::from_hex(s)
        .map(|h| h.0)
        .map_err(Error::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_hex_round_trip() {
        let mut h: Handle = [0; NCCL_NET_HANDLE_MAXSIZE];
        for (i, b) in h.iter_mut().enumerate() {
            *b = (i * 37) as u8;
        }
        let s = handle_to_hex(&h);
        assert_eq!(s.len(), 256);
        assert_eq!(handle_from_hex(&format!(" {s}\n")).unwrap(), h);
        assert!(handle_from_hex("abcd").is_err());
        assert!(handle_from_hex(&"zz".repeat(128)).is_err());
    }

    #[test]
    fn missing_library_is_a_clean_error() {
        let e = Net::load(Path::new("/nonexistent/libnope.so")).unwrap_err();
        assert!(e.to_string().contains("dlopen"), "{e}");
    }
}
