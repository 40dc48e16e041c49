//! Builds the C piece of the harness (NCCL's logger lives in `ferro-nccl-standin`):
//! - `csrc/old_verbs.c`: a stand-in "old rdma-core" libibverbs (every required entry point at
//!   IBVERBS_1.1 only, an empty device list), built as a shared library whose path reaches the
//!   tests as `FERRO_TESTS_OLD_VERBS_SO`.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc/old_verbs.c");
    println!("cargo:rerun-if-changed=csrc/old_verbs.map");

    let out = match std::env::var_os("OUT_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => panic!("OUT_DIR is not set (not run by cargo?)"),
    };
    let manifest = match std::env::var_os("CARGO_MANIFEST_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => panic!("CARGO_MANIFEST_DIR is not set (not run by cargo?)"),
    };
    let so = out.join("libibverbs-old-stub.so");
    let map = manifest.join("csrc/old_verbs.map");
    let src = manifest.join("csrc/old_verbs.c");
    let compiler = cc::Build::new().get_compiler();
    let mut cmd = compiler.to_command();
    cmd.args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-o"])
        .arg(&so)
        .arg(&src)
        .arg(format!("-Wl,--version-script={}", map.display()));
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("building the stand-in libibverbs failed ({s}): {cmd:?}"),
        Err(e) => panic!("cannot run the C compiler for the stand-in libibverbs ({e}): {cmd:?}"),
    }
    println!("cargo:rustc-env=FERRO_TESTS_OLD_VERBS_SO={}", so.display());
}
