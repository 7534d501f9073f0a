//! Compiles the C++ extension (csrc/) against the libtorch that torch-sys found, and hands
//! that location on to the crates that link the final binaries (they add the rpath).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/gradless_ext.cpp");
    let lib = PathBuf::from(
        std::env::var("DEP_TCH_LIBTORCH_LIB")
            .expect("torch-sys did not report where libtorch is (DEP_TCH_LIBTORCH_LIB)"),
    );
    let root = lib
        .parent()
        .expect("libtorch's lib dir has a parent")
        .to_path_buf();
    let include = root.join("include");

    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        // PyPI's torch is built with the new C++ ABI; with 0 the link fails (see
        // docs/ARCHITECTURE.md, "Cross-cutting concerns").
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        .flag("-DGLOG_USE_GLOG_EXPORT")
        .opt_level(2)
        .file("csrc/gradless_ext.cpp")
        .compile("gradless_ext");

    link_args(&lib);
    // Crates that depend on us (not on torch-sys) see this as DEP_GRADLESS_EXT_LIBTORCH_LIB.
    println!("cargo:libtorch_lib={}", lib.display());
    println!(
        "cargo:rustc-env=GRADLESS_LIBTORCH_VERSION={}",
        libtorch_version(&root)
    );
}

/// The libtorch version as its installation states it: a PyPI wheel's `version.py` or an
/// unpacked libtorch's `build-version`.
fn libtorch_version(root: &std::path::Path) -> String {
    if let Ok(text) = std::fs::read_to_string(root.join("version.py")) {
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("__version__") {
                let v = rest.trim_start_matches([' ', '=', ':']).trim();
                let v = v
                    .rsplit('=')
                    .next()
                    .unwrap_or(v)
                    .trim()
                    .trim_matches(['\'', '"']);
                if !v.is_empty() {
                    return v.to_string();
                }
            }
        }
    }
    if let Ok(text) = std::fs::read_to_string(root.join("build-version")) {
        return text.trim().to_string();
    }
    "unknown".to_string()
}

/// The final binaries (this crate's tests included) need libtorch at run time; torch-sys
/// gives its rpath only to its own C++ step, and `--as-needed` would drop libtorch_cuda
/// (nothing references it by symbol), silently hiding the GPU. server/build.rs does the same.
fn link_args(lib: &std::path::Path) {
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if lib.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
