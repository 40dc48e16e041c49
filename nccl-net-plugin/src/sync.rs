//! The synchronisation types of the cross-thread rules that are model-checked: `std`'s in the
//! library, `loom`'s when the crate is built with `--cfg loom` (the model tests in
//! [`crate::transport`]'s receiver registry run every interleaving of their threads then).
//! Only code whose correctness argument is about threads uses this facade; everything else
//! uses `std::sync` directly.

#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
