//! Timing lessons: the first passes are not representative, and CUDA runs asynchronously
//! (a timer must synchronise; a sync per batch stalls the pipeline). Every pass here is
//! timed by the kit's one loop, [`time_passes`](super::kit::time_passes). One module per
//! card: [`warm_up`], [`timing_gpu_work`], [`item_per_batch`].

pub mod item_per_batch;
pub mod timing_gpu_work;
pub mod warm_up;

pub use item_per_batch::{item_per_batch_rule, ITEM_PER_BATCH};
pub use timing_gpu_work::{timing_gpu_work_rule, TIMING_GPU_WORK};
pub use warm_up::{warm_up_context, warm_up_rule, WARM_UP};

use protocol::ModelId;

/// What issuing a pass costs the CPU here: Gradless calls libtorch from Rust.
pub(super) fn from_rust(model: ModelId) -> String {
    let ops = match model {
        ModelId::Resnet18 => "; ResNet-18's forward pass is about 70 ops",
        _ => "",
    };
    format!("Issued from Rust through libtorch: each op costs the CPU PyTorch's C++ dispatch and its kernel launches, with no Python interpreter in between{ops}")
}

/// Twenty timings around `x`, spread by up to 4%: a quiet machine's passes.
#[cfg(test)]
fn around(x: f64) -> Vec<f64> {
    (0..20).map(|i| x * (1.0 + (i % 5) as f64 * 0.01)).collect()
}
