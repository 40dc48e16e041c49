//! Test side, one rank of a multi-process plugin scenario (see `ferro_tests::scenario` and
//! `ferro_tests::rank` for the line protocol). Started by the integration tests:
//!
//! `nccl-harness --scenario NAME --rank R --nranks N [--dev rxe0] [--iters N] [--victim sender|receiver]
//! [--delay-ms MS] [--flap transient|for-good|peer-killed|failover]` (`--help` lists them)

fn main() {
    let code = ferro_tests::scenario::main_entry(std::env::args().skip(1));
    // Exit without unwinding further: the plugin's threads may still run; exit status is the verdict.
    std::process::exit(code);
}
