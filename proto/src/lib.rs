//! Protocol core (no I/O).
#![forbid(unsafe_code)]
