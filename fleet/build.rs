//! The fleet crate's own unit tests link the engine, so they need libtorch at run time too:
//! the same rpath as server/build.rs and engine/build.rs.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let lib = std::path::PathBuf::from(
        std::env::var("DEP_GRADLESS_EXT_LIBTORCH_LIB")
            .expect("the engine crate reports libtorch's lib dir"),
    );
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}
