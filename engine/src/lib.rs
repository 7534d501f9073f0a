//! Gradless's measurement engine: runs PyTorch models through libtorch (tch) under the
//! settings people get wrong — train/eval, grad mode, autocast, batch size — and measures
//! latency and memory the way PyTorch's own experts do. Plain Rust API, no web code: the
//! server and the CLI both drive it through [`Worker`].
//!
//! - [`torch_ext`]: the C++ extension's safe wrapper (the only `unsafe` code).
//! - [`lab`]: the device thread's state and the measurement of one run.
//! - [`worker`]: the thread that owns the device, and its bounded queue.
//! - [`pitfalls`]: one live experiment per pitfall card, each with a measured verdict.
//! - [`models`], [`device`], [`spec`], [`stats`]: the model zoo, the hardware, spec
//!   checking and latency statistics.

pub mod breakdown;
pub mod device;
pub mod error;
pub mod lab;
pub mod models;
pub mod peak;
pub mod pitfalls;
pub mod spec;
pub mod stats;
pub mod team;
pub mod torch_ext;
pub mod trace;
pub mod worker;

pub use device::{Machine, LIBTORCH_VERSION};
pub use error::EngineError;
pub use lab::{Budget, Lab, LabConfig, RunControl};
pub use spec::{check_spec, CheckedSpec};
pub use worker::{
    ExperimentError, ExperimentReply, ExperimentTicket, MeasureError, RunTicket, Sink, Worker,
    WorkerConfig,
};

/// The first line of a libtorch message, without tch's `Torch("...")` wrapping: libtorch
/// appends a whole C++ backtrace that means nothing to the person reading the error.
pub fn first_line(text: &str) -> String {
    let text = text.trim();
    let text = text.strip_prefix("Torch(\"").unwrap_or(text);
    let end = [text.find('\n'), text.find("\\n")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(text.len());
    text[..end].trim().trim_end_matches("\")").to_string()
}

/// Panics on the device thread are libtorch errors that [`lab::catch_torch`] turns into run
/// failures; printing them as crashes would only alarm whoever reads the log.
fn quiet_device_thread_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some("gradless-device") {
                tracing::debug!("libtorch error on the device thread: {info}");
            } else {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn first_line_strips_backtraces_and_wrapping() {
        let raw =
            "Torch(\"CUDA out of memory. Tried to allocate 2 GiB\\nException raised from malloc\")";
        assert_eq!(
            super::first_line(raw),
            "CUDA out of memory. Tried to allocate 2 GiB"
        );
        assert_eq!(super::first_line("plain\nsecond"), "plain");
    }
}
