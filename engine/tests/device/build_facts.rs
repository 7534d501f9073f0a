//! What this build can do on a GPU, as `scripts/gpu-check.sh --bundle` records it in the
//! bundle before a visit (issue 54): whether CUDA graph capture was compiled into the
//! engine's extension (engine/build.rs compiles it only where CUDA's runtime headers, `crt/`
//! included, were found; `gl_cuda_graphs_built` answers without a GPU), and the libtorch
//! the binaries were built against. With `GRADLESS_BUILD_FACTS=PATH` the facts are written
//! to PATH as JSON; `--bundle` fails on a bundle without graph capture unless told
//! otherwise. The same binary goes to the GPU host, so the answer is the one it will give.

#[test]
fn what_this_build_can_do_on_a_gpu() {
    let graphs = engine::torch_ext::cuda_graphs_built();
    if let Err(why) = &graphs {
        assert!(!why.is_empty(), "a build without CUDA graphs says why");
    }
    let facts = serde_json::json!({
        "cuda_graphs_built": graphs.is_ok(),
        "no_cuda_graphs": graphs.err(),
        "libtorch": engine::LIBTORCH_VERSION,
    });
    println!("build facts: {facts}");
    if let Ok(path) = std::env::var("GRADLESS_BUILD_FACTS") {
        std::fs::write(&path, facts.to_string()).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}
