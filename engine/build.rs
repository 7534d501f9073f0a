//! Compiles the C++ extension (csrc/) against the libtorch that torch-sys found, and hands
//! that location on to the crates that link the final binaries (they add the rpath).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/gradless_ext.cpp");
    println!("cargo:rerun-if-changed=csrc/gradless_cuda_graph.cpp");
    println!("cargo:rerun-if-changed=csrc/gradless_aoti.cpp");
    println!("cargo:rerun-if-changed=csrc/guarded.h");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    let lib = PathBuf::from(
        std::env::var("DEP_TCH_LIBTORCH_LIB")
            .expect("torch-sys did not report where libtorch is (DEP_TCH_LIBTORCH_LIB)"),
    );
    let root = lib
        .parent()
        .expect("libtorch's lib dir has a parent")
        .to_path_buf();
    let include = root.join("include");

    let mut build = cc::Build::new();
    // CUDA graphs need CUDA's runtime headers besides libtorch's (see
    // csrc/gradless_cuda_graph.cpp); without them the functions say why graphs are absent.
    let cuda_headers = cuda_runtime_headers(&root);
    match (&cuda_headers, lib.join("libtorch_cuda.so").exists()) {
        (Some(dir), true) => {
            build.include(dir).define("GRADLESS_CUDA_GRAPHS", None);
            // Symbols of libtorch_cuda (CUDAGraph) and libc10_cuda (streams) are used
            // directly: the final binaries must link both.
            println!("cargo:rustc-link-lib=dylib=torch_cuda");
            println!("cargo:rustc-link-lib=dylib=c10_cuda");
        }
        (None, true) => {
            build.define(
                "GRADLESS_NO_CUDA_GRAPHS_REASON",
                Some("\"this server was built without CUDA's runtime headers (cuda_runtime_api.h and crt/), so CUDA graph capture was not compiled in; scripts/setup.sh installs them (nvidia-cuda-crt), or set CUDA_HOME, and rebuild\""),
            );
        }
        (_, false) => {
            build.define(
                "GRADLESS_NO_CUDA_GRAPHS_REASON",
                Some("\"this libtorch was built without CUDA\""),
            );
        }
    }

    build
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
        .file("csrc/gradless_cuda_graph.cpp")
        .file("csrc/gradless_aoti.cpp")
        .compile("gradless_ext");

    link_args(&lib);
    // Crates that depend on us (not on torch-sys) see this as DEP_GRADLESS_EXT_LIBTORCH_LIB.
    println!("cargo:libtorch_lib={}", lib.display());
    println!(
        "cargo:rustc-env=GRADLESS_LIBTORCH_VERSION={}",
        libtorch_version(&root)
    );
}

/// The directory holding CUDA's runtime headers (`cuda_runtime_api.h` and the `crt/` ones
/// it includes): `$CUDA_HOME/include`, a toolkit in /usr/local/cuda, or the NVIDIA packages
/// PyPI's torch installs beside itself (`site-packages/nvidia/cu13/include`, completed
/// with `nvidia-cuda-crt` by scripts/setup.sh).
fn cuda_runtime_headers(torch_root: &std::path::Path) -> Option<PathBuf> {
    let mut candidates = vec![];
    if let Ok(home) = std::env::var("CUDA_HOME") {
        candidates.push(PathBuf::from(home).join("include"));
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    if let Some(site) = torch_root.parent() {
        if let Ok(entries) = std::fs::read_dir(site.join("nvidia")) {
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("include"))
                .collect();
            found.sort();
            candidates.extend(found);
        }
    }
    for dir in candidates.iter().filter(|d| d.is_dir()) {
        // Headers installed later (scripts/setup.sh adds crt/) change the directory.
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    // cuda_runtime.h needs the crt/ headers beside it, which PyPI ships apart
    // (nvidia-cuda-crt).
    candidates.into_iter().find(|dir| {
        dir.join("cuda_runtime_api.h").exists() && dir.join("crt/host_config.h").exists()
    })
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
