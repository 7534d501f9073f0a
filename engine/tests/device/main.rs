//! The engine's per-device tests, in ONE test binary: the CPU half of each test always runs,
//! the CUDA half, ignored unless asked for, on a GPU host (`common`'s `per_device!`).
//!
//! One binary rather than one per file, for two reasons. The GPU check carries its tests
//! to a GPU host that has no Rust toolchain and takes at most 64 MiB: a dozen executables
//! that each link libtorch's wrapper (about 30 MB stripped apiece) do not fit, one does
//! (`scripts/gpu-check.sh --bundle`). And the CUDA half must run one test at a time in one
//! process (the caching allocator's statistics are per process), which `common::cuda_lock`
//! can only promise within a single binary.
//!
//! Tests that read the whole process's state (budget.rs: its resident memory) or need
//! Python fixtures (team.rs, decoder_hf.rs) stay binaries of their own.

#[macro_use]
mod common;

mod a_a;
mod advanced;
mod build_facts;
mod generate;
mod guarantees;
mod invariants;
mod pitfalls;
mod quant;
mod soak;
mod trace;
