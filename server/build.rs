//! The `gradless` binary needs libtorch at run time: add the rpath and keep libtorch_cuda
//! linked (see engine/build.rs, which does the same for the engine's own tests).
fn main() {
    // Only this file: without the line, editing any file of the package (a test) would
    // re-run it and relink the server.
    println!("cargo:rerun-if-changed=build.rs");
    let lib = std::path::PathBuf::from(
        std::env::var("DEP_GRADLESS_EXT_LIBTORCH_LIB")
            .expect("the engine crate reports libtorch's lib dir"),
    );
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if lib.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
