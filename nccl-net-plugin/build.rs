fn main() {
    // NCCL 2.22-2.25 and 2.28+ dlclose the plugin when the last communicator goes away and dlopen
    // it again later. Rust statics (the loaded libibverbs table, open device contexts) and any
    // thread-local destructors must survive that, so the library is marked never-unloadable.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    // Every symbol must resolve at link time: an undefined one would only surface as NCCL's
    // dlopen failing on a user's machine.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,defs");
}
