//! The figures several cards report, each defined once (a figure only one card reports is
//! defined beside that card; see [`kit::figure`](super::kit::figure)).

use protocol::Unit;

use super::kit::FigureName;

pub const BATCH_P50_EAGER: FigureName = FigureName::new("batch {}: p50 eager", Unit::Ms);
pub const EACH_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("{}: peak above baseline", Unit::Bytes);
pub const ERROR_RAISED: FigureName = FigureName::new("error raised", Unit::Bool);
pub const KV_CACHE_MIB: FigureName = FigureName::new("KV cache", Unit::Mib);
pub const LARGEST_OUTPUT_DIFFERENCE: FigureName = FigureName::new("largest output difference", Unit::Abs);
pub const P50_LATENCY_MS: FigureName = FigureName::new("p50 latency (ms)", Unit::Ms);
pub const P50_MS: FigureName = FigureName::new("p50 (ms)", Unit::Ms);
pub const PEAK_ABOVE_BASELINE_MIB: FigureName = FigureName::new("peak above baseline (MiB)", Unit::Mib);
pub const WEIGHTS_MIB: FigureName = FigureName::new("weights", Unit::Mib);
pub const BATCH_1_P50_EAGER: FigureName = BATCH_P50_EAGER.instance("batch 1: p50 eager");
pub const EVAL_NO_GRAD_PEAK_ABOVE_BASELINE: FigureName = EACH_PEAK_ABOVE_BASELINE.instance("eval + no_grad: peak above baseline");
pub const EVAL_ONLY_PEAK_ABOVE_BASELINE: FigureName = EACH_PEAK_ABOVE_BASELINE.instance("eval only: peak above baseline");
pub const TRAIN_PEAK_ABOVE_BASELINE: FigureName = EACH_PEAK_ABOVE_BASELINE.instance("train: peak above baseline");
