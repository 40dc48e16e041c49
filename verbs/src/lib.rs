//! libibverbs access.
