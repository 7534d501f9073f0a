//! What a comparison of generations shows in words (Compare cache modes, Compare grad
//! modes): one sentence per run against the reference, its per-token time read by the one
//! rule every page reads an interval with (`protocol::noise::decided`).

use protocol::noise::{decided, not_decided_words};
use protocol::stats::RatioCi;
use protocol::{format_bytes, Choice, GenPhase, KvCacheKind, Report};

use super::run_name;

/// One run's figures as a comparison reads them.
pub struct Row {
    pub name: String,
    pub cache: KvCacheKind,
    pub grad: protocol::GradMode,
    /// Every decode step's latency, in order.
    pub decode_ms: Vec<f64>,
    /// Held beyond the weights and prompt after the last step.
    pub held_bytes: u64,
    pub kv_bytes: u64,
    pub graph_bytes: u64,
}

impl Row {
    pub fn of(r: &Report) -> Option<Row> {
        let g = r.generation.as_ref()?;
        let last = g.steps.last();
        Some(Row {
            name: run_name(r),
            cache: g.cache,
            grad: r.spec.grad,
            decode_ms: g.steps.iter().filter(|s| s.phase == GenPhase::Decode).map(|s| s.latency_ms).collect(),
            held_bytes: last.map_or(0, |s| s.allocated_bytes.saturating_sub(r.memory.baseline_bytes)),
            kv_bytes: last.map_or(0, |s| s.kv_cache_bytes),
            graph_bytes: last.map_or(0, |s| s.graph_bytes),
        })
    }

    fn p50(&self) -> Option<f64> {
        protocol::stats::median(&self.decode_ms)
    }
}

/// What a comparison shows, one sentence per run against the reference (the dynamic cache,
/// or no_grad, else the first run): per-token time as the ratio of medians with its 95%
/// interval — a difference inside the noise is said to be one — the last step's time
/// (which rises without a cache), and what stays held after the last step.
pub fn comparison_reading(rows: &[Row]) -> Vec<String> {
    if rows.len() < 2 {
        return vec![];
    }
    let by_cache = rows.iter().any(|r| r.cache != rows[0].cache);
    let reference = rows
        .iter()
        .find(|r| if by_cache { r.cache == KvCacheKind::Dynamic } else { r.grad == protocol::GradMode::NoGrad })
        .unwrap_or(&rows[0]);
    let what = |r: &Row| if by_cache { format!("the {} cache", r.cache.as_str()) } else { r.grad.as_str().to_string() };
    let mut out = vec![];
    for r in rows.iter().filter(|r| !std::ptr::eq(*r, reference)) {
        let (Some(a), Some(b)) = (r.p50(), reference.p50()) else { continue };
        // Read by the one rule every page reads an interval with (`protocol::noise::decided`).
        let time = match RatioCi::of(&r.decode_ms, &reference.decode_ms) {
            Some(ci) => match decided(ci.lo, ci.hi) {
                Some(Choice::Higher) => format!("{:.1}× slower per token than {} ({}×, 95% interval)", ci.ratio, what(reference), ci.range()),
                // Faster: the ratio and its interval turned over, so both read as "× faster".
                Some(Choice::Lower) => format!("{:.1}× faster per token than {} ({:.2}–{:.2}×, 95% interval)", 1.0 / ci.ratio, what(reference), 1.0 / ci.hi, 1.0 / ci.lo),
                Some(_) => format!("no per-token difference from {} we can tell apart from noise", what(reference)),
                None => not_decided_words(&format!("the medians say ×{:.2} per token against {}, but the steps vary too much to tell ({}×, 95% interval)", ci.ratio, what(reference), ci.range())),
            },
            None => format!("too few steps to compare with {}", what(reference)),
        };
        let name = if by_cache && r.cache == KvCacheKind::Off { "Without a cache (off)".to_string() } else { format!("With {}", what(r)) };
        let mut s = format!("{name}: {time}, p50 {a:.2} ms against {b:.2} ms");
        if let (Some(x), Some(y)) = (r.decode_ms.last(), reference.decode_ms.last()) {
            s.push_str(&format!("; its last step {x:.2} ms against {y:.2} ms"));
            if by_cache && r.cache == KvCacheKind::Off {
                s.push_str(" (each step recomputes the whole prefix, so its time grows with the position)");
            }
        }
        s.push_str(&format!(
            ". Held after the last step: {} against {} (KV cache {} against {}",
            format_bytes(r.held_bytes),
            format_bytes(reference.held_bytes),
            format_bytes(r.kv_bytes),
            format_bytes(reference.kv_bytes)
        ));
        if r.graph_bytes > 0 {
            s.push_str(&format!("; autograd's graph {}", format_bytes(r.graph_bytes)));
        }
        s.push_str(").");
        out.push(s);
    }
    out
}

/// Charts and figures of the shown generation (or of the comparison's runs).

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::GradMode;

    fn row(cache: KvCacheKind, decode_ms: Vec<f64>, kv: u64) -> Row {
        Row {
            name: format!("{} cache · no_grad", cache.as_str()),
            cache,
            grad: GradMode::NoGrad,
            decode_ms,
            held_bytes: kv + 4096,
            kv_bytes: kv,
            graph_bytes: 0,
        }
    }

    #[test]
    fn a_cache_comparison_says_how_much_slower_off_is_than_dynamic() {
        let dynamic = row(KvCacheKind::Dynamic, (0..20).map(|i| 3.0 + 0.01 * (i % 3) as f64).collect(), 194_560);
        let stat = row(KvCacheKind::Static, (0..20).map(|i| 3.0 + 0.01 * ((i + 1) % 3) as f64).collect(), 194_560);
        let off = row(KvCacheKind::Off, (0..20).map(|i| 5.0 + 0.5 * i as f64).collect(), 0);
        let s = comparison_reading(&[dynamic, stat, off]);
        assert_eq!(s.len(), 2);
        assert!(s[0].starts_with("With the static cache: no per-token difference from the dynamic cache we can tell apart from noise, p50"), "{}", s[0]);
        assert!(s[1].starts_with("Without a cache (off): 3.2× slower per token than the dynamic cache ("), "{}", s[1]);
        assert!(s[1].contains("interval), p50 9.75 ms against 3.01 ms"), "{}", s[1]);
        assert!(s[1].contains("last step 14.50 ms against 3.01 ms"), "{}", s[1]);
        assert!(s[1].contains("KV cache 0 B against 190.0 KiB"), "{}", s[1]);
    }

    #[test]
    fn faster_reads_as_faster_interval_and_all() {
        let slow = row(KvCacheKind::Dynamic, (0..20).map(|i| 6.0 + 0.01 * (i % 3) as f64).collect(), 1);
        let fast = row(KvCacheKind::Static, (0..20).map(|i| 3.0 + 0.01 * (i % 3) as f64).collect(), 1);
        let s = comparison_reading(&[slow, fast]);
        assert!(s[0].starts_with("With the static cache: 2.0× faster per token than the dynamic cache (1.9"), "{}", s[0]);
        assert!(s[0].contains("–2.0"), "{}", s[0]);
    }

    #[test]
    fn one_run_is_no_comparison() {
        assert!(comparison_reading(&[row(KvCacheKind::Dynamic, vec![1.0; 8], 1)]).is_empty());
    }

    /// Steps too noisy to tell (an interval from ×0.5 to ×2): the reading says it decides
    /// nothing, never "no difference".
    #[test]
    fn a_comparison_the_noise_cannot_decide_says_so() {
        let steady = row(KvCacheKind::Dynamic, (0..20).map(|i| 3.0 + 0.01 * (i % 3) as f64).collect(), 1);
        let noisy = row(KvCacheKind::Static, (0..20).map(|i| if i % 2 == 0 { 1.5 } else { 6.0 }).collect(), 1);
        let s = comparison_reading(&[steady, noisy]);
        assert!(s[0].starts_with("With the static cache: not decided: the medians say ×"), "{}", s[0]);
        assert!(s[0].contains("rerun on a quieter machine, or with more iterations") && !s[0].contains("no per-token difference"), "{}", s[0]);
    }
}
