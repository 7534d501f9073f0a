//! Statistics that decide whether a difference is noise: percentiles (numpy's default
//! interpolation), the interquartile range and the noise levels torch.utils.benchmark warns
//! at, and a seeded bootstrap confidence interval of the ratio of two medians.
//!
//! Pure and deterministic (a fixed-seed generator, no clock), because the browser (WASM),
//! the server and the engine must read the same samples the same way: the pitfall rules
//! call [`RatioCi::of`], and two separately measured runs (the Lab's reading line,
//! `/compare`, the CLI) go through [`crate::noise::Comparison`], which adds this server's
//! run-to-run noise to it.

use crate::Report;

/// The `q`-th percentile (0..=100) of `sorted` (ascending, non-empty), interpolating
/// linearly between closest ranks as numpy does by default.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    debug_assert!(!sorted.is_empty());
    let rank = (q / 100.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// The median of unsorted samples; `None` when empty.
pub fn median(samples: &[f64]) -> Option<f64> {
    (!samples.is_empty()).then(|| percentile(&sorted(samples), 50.0))
}

/// The interquartile range (p75 − p25) of unsorted samples; `None` with fewer than 4,
/// where quartiles mean little.
pub fn iqr(samples: &[f64]) -> Option<f64> {
    if samples.len() < 4 {
        return None;
    }
    let s = sorted(samples);
    Some(percentile(&s, 75.0) - percentile(&s, 25.0))
}

/// How noisy a run's timings are: IQR over median, at torch.utils.benchmark's thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Noise {
    /// IQR at most 10% of the median.
    Quiet,
    /// IQR above 10% of the median.
    Noisy,
    /// IQR above 25% of the median: the run says little; rerun it.
    VeryNoisy,
}

/// IQR / median above this is "noisy" (torch.utils.benchmark's first warning).
pub const NOISY: f64 = 0.10;
/// IQR / median above this is "very noisy, rerun".
pub const VERY_NOISY: f64 = 0.25;

impl Noise {
    pub fn of_relative(iqr_over_median: f64) -> Noise {
        if iqr_over_median > VERY_NOISY {
            Noise::VeryNoisy
        } else if iqr_over_median > NOISY {
            Noise::Noisy
        } else {
            Noise::Quiet
        }
    }

    /// The warning people see next to the figures; `None` when quiet.
    pub fn warning(self, iqr_over_median: f64) -> Option<String> {
        let pct = iqr_over_median * 100.0;
        match self {
            Noise::Quiet => None,
            Noise::Noisy => Some(format!(
                "noisy: the interquartile range is {pct:.0}% of the median (above 10%)"
            )),
            Noise::VeryNoisy => Some(format!(
                "very noisy, rerun: the interquartile range is {pct:.0}% of the median (above 25%); something else was using the machine"
            )),
        }
    }
}

impl Report {
    /// The timed iterations' latencies, in order.
    pub fn latencies(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.latency_ms).collect()
    }

    /// IQR / median of the timed latencies, from the stored IQR or (records made before it
    /// existed) from the samples; `None` with fewer than 4 samples or a zero median.
    pub fn relative_iqr(&self) -> Option<f64> {
        let iqr = self
            .latency_ms
            .iqr
            .or_else(|| iqr(&self.latencies()))
            .filter(|_| self.samples.len() >= 4)?;
        let m = self.latency_ms.p50;
        (m > 0.0).then(|| iqr / m)
    }

    /// The noise warning for this run; `None` when quiet or unknown.
    pub fn noise_warning(&self) -> Option<String> {
        let rel = self.relative_iqr()?;
        Noise::of_relative(rel).warning(rel)
    }
}

/// Fewer samples than this on either side and no interval is trusted: a bootstrap of 3
/// points cannot see the noise it would need to.
pub const MIN_SAMPLES: usize = 5;

/// Bootstrap resamples per interval.
const RESAMPLES: usize = 2000;

/// SplitMix64: small, seeded and the same on every target.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (((self.next() >> 32) * n as u64) >> 32) as usize
    }
}

fn resampled_median(rng: &mut Rng, from: &[f64], scratch: &mut Vec<f64>) -> f64 {
    scratch.clear();
    scratch.extend((0..from.len()).map(|_| from[rng.below(from.len())]));
    let n = scratch.len();
    let mid = n / 2;
    let (_, &mut upper, _) = scratch.select_nth_unstable_by(mid, f64::total_cmp);
    if n % 2 == 1 {
        upper
    } else {
        let lower = scratch[..mid]
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        (lower + upper) / 2.0
    }
}

/// The ratio of two medians, `a` over `b`, with its 95% percentile-bootstrap interval:
/// each side is resampled with replacement ([`RESAMPLES`] times, seeded) and the 2.5th and
/// 97.5th percentiles of the resampled ratios bound it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioCi {
    pub ratio: f64,
    pub lo: f64,
    pub hi: f64,
    /// Samples on each side.
    pub n_a: usize,
    pub n_b: usize,
}

/// Where an interval sits against a threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The whole interval is above the threshold.
    Above,
    /// The whole interval is below it.
    Below,
    /// The interval contains it (or too few samples to trust the interval).
    Straddles,
}

impl RatioCi {
    /// `None` when either side is empty or a median is not positive (no ratio exists).
    pub fn of(a: &[f64], b: &[f64]) -> Option<RatioCi> {
        let (ma, mb) = (median(a)?, median(b)?);
        if !(ma > 0.0 && mb > 0.0) {
            return None;
        }
        // The seed depends on the sizes only: the same samples always give the same interval.
        let mut rng = Rng(0x6772_6164_6c65_7373 ^ ((a.len() as u64) << 32 | b.len() as u64));
        let mut scratch = Vec::with_capacity(a.len().max(b.len()));
        let mut ratios: Vec<f64> = (0..RESAMPLES)
            .map(|_| {
                let ra = resampled_median(&mut rng, a, &mut scratch);
                let rb = resampled_median(&mut rng, b, &mut scratch);
                ra / rb
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        Some(RatioCi {
            ratio: ma / mb,
            lo: percentile(&ratios, 2.5),
            hi: percentile(&ratios, 97.5),
            n_a: a.len(),
            n_b: b.len(),
        })
    }

    /// Enough samples on both sides for the interval to mean something.
    pub fn trusted(&self) -> bool {
        self.n_a.min(self.n_b) >= MIN_SAMPLES
    }

    /// Where the interval sits against `threshold`; untrusted intervals straddle everything.
    pub fn side(&self, threshold: f64) -> Side {
        if !self.trusted() {
            Side::Straddles
        } else if self.lo > threshold {
            Side::Above
        } else if self.hi < threshold {
            Side::Below
        } else {
            Side::Straddles
        }
    }

    /// "1.22–1.40": the interval as printed.
    pub fn range(&self) -> String {
        format!("{:.2}–{:.2}", self.lo, self.hi)
    }

    /// About how many more iterations per side would likely move the interval off
    /// `threshold`, assuming its width shrinks as 1/√n around the same ratio; `None` when
    /// it is already off it, or the ratio sits so close to the threshold that even 50 times
    /// the iterations would likely not decide it.
    pub fn more_iterations(&self, threshold: f64) -> Option<u32> {
        let n = self.n_a.min(self.n_b).max(1) as f64;
        if self.side(threshold) != Side::Straddles {
            return None;
        }
        let (c, t) = (self.ratio.ln(), threshold.ln());
        let distance = (c - t).abs();
        // The half-width on the threshold's side, in log space (ratios are multiplicative).
        let half = if c >= t {
            c - self.lo.ln()
        } else {
            self.hi.ln() - c
        };
        if !(distance > 0.0 && half.is_finite()) {
            return None;
        }
        let needed = n * (half / distance).powi(2) * 1.1;
        let needed = needed.max(MIN_SAMPLES as f64);
        (needed <= 50.0 * n).then(|| (needed - n).ceil().max(1.0) as u32)
    }

    /// How people read `a` against `b` as latencies: "1.31× slower (1.22–1.40)", "1.31×
    /// faster (1.22–1.40)", or no difference we can tell apart from noise, with how many
    /// more iterations would likely decide it.
    pub fn latency_reading(&self) -> String {
        match self.side(1.0) {
            Side::Above => format!("{:.2}× slower ({})", self.ratio, self.range()),
            Side::Below => format!(
                "{:.2}× faster ({:.2}–{:.2})",
                1.0 / self.ratio,
                1.0 / self.hi,
                1.0 / self.lo
            ),
            Side::Straddles => {
                let mut s = if self.trusted() {
                    format!(
                        "no difference we can tell apart from noise (ratio {:.2}, 95% interval {})",
                        self.ratio,
                        self.range()
                    )
                } else {
                    format!(
                        "too few iterations to tell a difference from noise ({} and {}; at least {MIN_SAMPLES} each)",
                        self.n_a, self.n_b
                    )
                };
                if let Some(more) = self.more_iterations(1.0) {
                    s.push_str(&format!(
                        "; about {more} more iterations each would likely decide it"
                    ));
                }
                s
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Timing-like samples: a floor plus a skewed, heavy-tailed excess, seeded.
    fn timings(rng: &mut Rng, n: usize, scale: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
                let tail = if rng.below(20) == 0 { 0.5 } else { 0.0 };
                scale * (1.0 + 0.1 * -(1.0 - u).ln() + tail)
            })
            .collect()
    }

    #[test]
    fn percentiles_and_iqr_interpolate_like_numpy() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&xs, 50.0), 2.5);
        assert!((percentile(&xs, 95.0) - 3.85).abs() < 1e-12);
        assert_eq!(iqr(&[4.0, 1.0, 3.0, 2.0]), Some(1.5));
        assert_eq!(iqr(&[1.0, 2.0, 3.0]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    }

    #[test]
    fn noise_levels_follow_torch_utils_benchmark() {
        assert_eq!(Noise::of_relative(0.05), Noise::Quiet);
        assert_eq!(Noise::of_relative(0.12), Noise::Noisy);
        assert_eq!(Noise::of_relative(0.3), Noise::VeryNoisy);
        assert!(Noise::Quiet.warning(0.05).is_none());
        assert!(Noise::VeryNoisy.warning(0.3).unwrap().contains("rerun"));
    }

    #[test]
    fn the_same_setting_reads_as_no_difference_in_at_least_19_of_20_repeats() {
        let mut rng = Rng(7);
        let mut quiet = 0;
        for _ in 0..20 {
            let (a, b) = (timings(&mut rng, 20, 10.0), timings(&mut rng, 20, 10.0));
            let ci = RatioCi::of(&a, &b).unwrap();
            assert!(ci.lo <= ci.ratio && ci.ratio <= ci.hi, "{ci:?}");
            if ci.side(1.0) == Side::Straddles {
                quiet += 1;
                assert!(ci.latency_reading().starts_with("no difference"));
            }
        }
        assert!(quiet >= 19, "only {quiet} of 20 read as no difference");
    }

    #[test]
    fn a_real_two_fold_difference_is_always_detected() {
        let mut rng = Rng(11);
        for _ in 0..20 {
            let (slow, fast) = (timings(&mut rng, 10, 20.0), timings(&mut rng, 10, 10.0));
            let ci = RatioCi::of(&slow, &fast).unwrap();
            assert_eq!(ci.side(1.0), Side::Above, "{ci:?}");
            assert!(ci.latency_reading().contains("slower"));
            let back = RatioCi::of(&fast, &slow).unwrap();
            assert_eq!(back.side(1.0), Side::Below);
            assert!(back.latency_reading().contains("faster"), "{back:?}");
        }
    }

    #[test]
    fn the_interval_is_deterministic_and_needs_enough_samples() {
        let mut rng = Rng(3);
        let (a, b) = (timings(&mut rng, 30, 10.0), timings(&mut rng, 30, 10.0));
        assert_eq!(RatioCi::of(&a, &b), RatioCi::of(&a, &b));
        // Three samples each, however far apart, are never trusted.
        let few = RatioCi::of(&[10.0, 11.0, 12.0], &[1.0, 1.1, 1.2]).unwrap();
        assert_eq!(few.side(1.0), Side::Straddles);
        assert!(few.latency_reading().starts_with("too few"));
        assert!(RatioCi::of(&[], &a).is_none());
        assert!(RatioCi::of(&[0.0; 5], &a).is_none());
    }

    #[test]
    fn more_iterations_grow_as_the_difference_shrinks() {
        // Wide spread, few samples: a 10% and a 6% difference both straddle 1, with the
        // same width (scaling one side shifts every resampled ratio by the same factor).
        let b = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0];
        let scaled = |f: f64| b.iter().rev().map(|x| x * f).collect::<Vec<_>>();
        let (big, small) = (
            RatioCi::of(&scaled(1.10), &b).unwrap(),
            RatioCi::of(&scaled(1.06), &b).unwrap(),
        );
        assert_eq!((big.side(1.0), small.side(1.0)), (Side::Straddles, Side::Straddles));
        let (m_big, m_small) = (
            big.more_iterations(1.0).unwrap(),
            small.more_iterations(1.0).unwrap(),
        );
        assert!(m_small > m_big, "{m_small} <= {m_big}");
        assert!(big.latency_reading().contains(&format!("about {m_big} more")));
        // Exactly on the threshold: no number of iterations would likely decide it.
        assert_eq!(RatioCi::of(&b, &b).unwrap().more_iterations(1.0), None);
        // A decided interval needs no more.
        assert_eq!(RatioCi::of(&scaled(3.0), &b).unwrap().more_iterations(1.0), None);
    }
}
