//! Builds `csrc/logger.c`, the variadic NCCL logger (stable Rust cannot define a C variadic
//! function), linked statically into the stand-in library.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc/logger.c");
    cc::Build::new()
        .file("csrc/logger.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("ferro_standin_logger");
}
