//! Test side, the integration-test harness for the Ferro NCCL network plugin.
//!
//! The plugin is loaded exactly the way NCCL loads it: `dlopen(path, RTLD_NOW|RTLD_LOCAL)`, then
//! `dlsym("ncclNetPlugin_v<N>")` (v8 unless `FERRO_NET_ABI` names another version), and every
//! call goes through that exported table ([`net::Net`]).
//! Nothing here links the plugin crate.
//!
//! The NCCL side (loading, typed table calls, handles, buffers, NCCL's logger) is the
//! `ferro-nccl-standin` crate, shared with the benchmark and the plugin's in-process tests; its
//! modules are re-exported here as [`net`], [`handle`], [`buffer`], [`logger`] and [`error`].
//! - [`checks`]: bad-input checks shared by the host and guest tests.
//! - [`elf`]: the `DT_NEEDED` list of a shared object, read from its dynamic section.
//! - [`guest`]: facts about the soft-RoCE test-bed guest (`ibv_devinfo`, `rdma resource`).
//! - [`driver`] (test side) and [`rank`] (process side): multi-process scenarios, one process per
//!   rank, wired through stdin/stdout by a small line protocol.
//! - [`scenario`]: what each rank of each scenario does (run by the `nccl-harness` binary).
//!
//! Running:
//! - host: `cargo build -p nccl-net-plugin && cargo test -p ferro-tests --lib --bins --test host_load`;
//! - guest (soft-RoCE, see `testbed/`): build with `cargo test -p ferro-tests --no-run`, then run
//!   the `guest_devices` and `guest_datapath` test binaries inside the guest with
//!   `--test-threads=1`. Outside the guest they fail at once with "needs the soft-RoCE guest".
//! - `FERRO_PLUGIN_SO=/path/to/plugin.so` tests another build; `FERRO_TEST_VERBOSE=1` echoes plugin
//!   log lines and every rank's output; `--nocapture` shows each scenario's per-rank verdicts.
//! - One scenario by hand: `target/debug/nccl-harness --scenario size-sweep --rank 0 --nranks 2`
//!   (it prints `HANDLE <hex>` and waits for `PEER <hex>` on stdin; see [`rank`]).

pub mod checks;
pub mod driver;
pub mod elf;
pub mod guest;
pub mod rank;
pub mod scenario;

pub use ferro_nccl_standin::{
    bail, blocking, buffer, ensure, error, handle, logger, net, raw, table,
};

pub use error::{HResult, HarnessError, NcclExt};
pub use handle::{Handle, handle_socket_addr};
pub use net::{Net, Properties};
