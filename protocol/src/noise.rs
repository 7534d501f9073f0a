//! Run-to-run noise: how far apart two runs of identical settings land on this server, and
//! the one decision whether two separately measured runs differ in latency
//! ([`Comparison::of_runs`]).
//!
//! The bootstrap interval of [`crate::stats::RatioCi`] covers the noise *within* each run.
//! Two runs measured minutes apart on a shared machine also differ by the machine's drift
//! between them (other processes, frequency, caches), which no resampling of either run can
//! see: two runs of the same settings then "differ" by 1.2×. So a comparison of two runs is
//! decided against a floor *measured here*, the larger of:
//!
//! - **the server's record of repeats** ([`NoiseBook`]): the device thread keeps the medians of
//!   the runs it measured (and, at start, the ones it recorded before); runs of identical
//!   settings on the same device give the pooled standard deviation of ln(p50) between runs
//!   of one setting, which every report carries as measured when it finished
//!   ([`crate::Report::run_to_run`]), so a record reads the same forever. A model with too
//!   few repeats of its own borrows the device's, but only repeats of the same kind of run
//!   (passes or decode steps) within a factor of 8 in p50: noise depends on how long a
//!   run lasts against the machine's load;
//! - **the two runs' own drift**: each run's timed iterations split into consecutive blocks,
//!   the spread of the blocks' medians ([`block_drift`]); for a generation, whose steps slow
//!   down with the position by design, around the run's trend.
//!
//! Either estimate becomes the half-width two runs of one setting stay within 99 times in
//! 100, `t(df) · √2 · σ` in ln ratio (Student's t for the few degrees of freedom a young
//! server has), printed as "±X%". Once the record has ten degrees of freedom it is the floor
//! alone; from three, the larger of the two; below three (one or two repeats, whose floor
//! would be hundreds of percent wide) the drift alone. Two runs differ only when the ratio is past that
//! floor *and* the bootstrap interval excludes 1 *and* the fast iterations (p10) moved past
//! the floor the same way: a run the machine's load slowed has its median pushed up while
//! the iterations that ran undisturbed stay put, and a setting moves both. Runs measured together, interleaved (a pitfall experiment's arms),
//! have no drift between them and are read with [`crate::stats::RatioCi`] alone.
//!
//! Pure and deterministic like `stats`: the browser, the server and the CLI read the same
//! reports the same way.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::predict::not_decided;
/// The one rule by which an interval of a ratio decides lower, about the same, higher or
/// nothing (`crate::predict`'s): here for the pages that read a ratio's interval of their
/// own (a generation's comparisons), so they read it as every other page does.
pub use crate::predict::{decided, not_decided as not_decided_words, SAME_WITHIN_FACTOR};
use crate::stats::{median, RatioCi, Side, MIN_SAMPLES};
use crate::Report;

/// This server's run-to-run noise when a run finished: the pooled spread of the medians of
/// repeated runs of identical settings it had measured on the same device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunToRun {
    /// Pooled standard deviation of ln(p50) between runs of one setting.
    pub sigma_log: f64,
    /// Degrees of freedom of that estimate: runs minus groups of identical settings.
    pub df: u32,
    /// Runs in the groups it pools.
    pub runs: u32,
    /// Pooled over this model's settings only, or over every model of the device.
    pub scope: NoiseScope,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum NoiseScope {
    Model,
    Device,
}

/// The two-sided 99% quantile of Student's t with `df` degrees of freedom.
pub fn t99(df: u32) -> f64 {
    const T: [f64; 30] = [
        63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055,
        3.012, 2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797,
        2.787, 2.779, 2.771, 2.763, 2.756, 2.750,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => T[df as usize - 1],
        // Within 0.003 of the exact quantile past 30.
        _ => 2.576 + 5.2 / df as f64,
    }
}

/// The half-width, in ln ratio, that two runs whose ln medians each scatter by `sigma`
/// (estimated with `df` degrees of freedom) stay within 99 times in 100. 99%, not 95%:
/// a reader compares many pairs, and at 95% one A/A pair in twenty would "differ".
fn half_width(sigma: f64, df: u32) -> f64 {
    t99(df) * std::f64::consts::SQRT_2 * sigma
}

/// From this many degrees of freedom on, the record of repeats is the floor on its own:
/// it measured what two runs of one setting do here, and the two runs' drift (from six
/// degrees of freedom) would mostly add its own uncertainty.
const RECORD_ALONE_DF: u32 = 10;
/// Below this many degrees of freedom the record is not used at all: from one or two
/// repeats Student's t makes the floor hundreds of percent wide, which says nothing.
const RECORD_MIN_DF: u32 = 3;

/// Blocks a run's timed iterations are split into to see its drift; each holds at least
/// [`BLOCK_MIN`] iterations.
const BLOCKS: usize = 4;
const BLOCK_MIN: usize = 4;

/// A run's drift during its timed iterations: the standard deviation of ln of the medians
/// of consecutive blocks of them (up to four, of at least four iterations each), with its
/// degrees of freedom. A generation's steps are taken around their least-squares trend in
/// the step's position first: without a cache each step is slower than the last by design,
/// which is the effect, not noise. `None` with fewer than 8 iterations or a non-positive one.
pub fn block_drift(r: &Report) -> Option<(f64, u32)> {
    drift(&r.latencies(), r.generation.is_some())
}

/// [`block_drift`] of latencies in the order measured, around their trend when `detrended`.
pub fn drift(latencies: &[f64], detrended: bool) -> Option<(f64, u32)> {
    if latencies.iter().any(|&x| !(x > 0.0)) {
        return None;
    }
    let mut logs: Vec<f64> = latencies.iter().map(|x| x.ln()).collect();
    if detrended {
        detrend(&mut logs);
    }
    let k = BLOCKS.min(logs.len() / BLOCK_MIN);
    if k < 2 {
        return None;
    }
    let n = logs.len();
    let medians: Vec<f64> = (0..k)
        .filter_map(|j| median(&logs[j * n / k..(j + 1) * n / k]))
        .collect();
    Some((sd(&medians)?, (k - 1) as u32))
}

/// Removes the least-squares line in the index from `ys`.
fn detrend(ys: &mut [f64]) {
    let n = ys.len() as f64;
    let mx = (n - 1.0) / 2.0;
    let my = ys.iter().sum::<f64>() / n;
    let sxx: f64 = (0..ys.len()).map(|i| (i as f64 - mx).powi(2)).sum();
    let sxy: f64 = ys.iter().enumerate().map(|(i, y)| (i as f64 - mx) * (y - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    for (i, y) in ys.iter_mut().enumerate() {
        *y -= my + slope * (i as f64 - mx);
    }
}

/// The 10th percentile of unsorted samples; `None` when empty.
fn p10(xs: &[f64]) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| crate::stats::percentile(&v, 10.0))
}

/// Sample standard deviation; `None` below two values.
fn sd(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    Some((xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt())
}

/// Where a comparison's floor comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum FloorSource {
    /// The server's record of repeated runs of identical settings.
    Recorded(RunToRun),
    /// The two runs' own drift between blocks of their iterations.
    Drift,
}

/// The run-to-run floor of one comparison: the half-width of the ln ratio two runs of
/// identical settings stay within here, 99 times in 100.
#[derive(Clone, Debug, PartialEq)]
pub struct Floor {
    pub half_width_log: f64,
    pub source: FloorSource,
}

impl Floor {
    /// The floor as people read it: "±8%".
    pub fn percent(&self) -> String {
        let pct = (self.half_width_log.exp() - 1.0) * 100.0;
        if pct < 10.0 {
            format!("±{pct:.1}%")
        } else {
            format!("±{pct:.0}%")
        }
    }

    /// How far apart two runs of the same settings land, as a newcomer reads it: "8%", or
    /// past doubling "a factor of 5.3" (a young server's floor can be that wide).
    pub fn apart(&self) -> String {
        let factor = self.half_width_log.exp();
        if factor < 2.0 {
            format!("{:.0}%", ((factor - 1.0) * 100.0).max(1.0))
        } else {
            format!("a factor of {factor:.1}")
        }
    }

    /// Where it was measured, as a clause.
    pub fn origin(&self) -> String {
        match &self.source {
            FloorSource::Recorded(r) => format!(
                "measured from {} repeated runs of identical settings {}",
                r.runs,
                match r.scope {
                    NoiseScope::Model => "of this model on this device",
                    NoiseScope::Device => "on this device",
                }
            ),
            FloorSource::Drift => {
                "measured from the two runs' own drift between blocks of their iterations"
                    .to_string()
            }
        }
    }

    /// The floor for `a` against `b`: the server's record (the one carried by the report
    /// with more runs behind it) once it has [`RECORD_ALONE_DF`] degrees of freedom; from
    /// [`RECORD_MIN_DF`] the larger of the record and the runs' own drift; before that the
    /// drift alone. `None` when neither is known
    /// (too few iterations, and no repeats recorded).
    pub fn of(a: &Report, b: &Report) -> Option<Floor> {
        let recorded = [a.run_to_run.as_ref(), b.run_to_run.as_ref()]
            .into_iter()
            .flatten()
            .filter(|r| r.df >= RECORD_MIN_DF)
            .max_by_key(|r| r.runs)
            .map(|r| Floor {
                half_width_log: half_width(r.sigma_log, r.df),
                source: FloorSource::Recorded(r.clone()),
            });
        let drift = match (block_drift(a), block_drift(b)) {
            (Some((sa, da)), Some((sb, db))) => Some(Floor {
                half_width_log: half_width(((sa * sa + sb * sb) / 2.0).sqrt(), da + db),
                source: FloorSource::Drift,
            }),
            _ => None,
        };
        if let Some(r) = recorded.as_ref().filter(|f| match &f.source {
            FloorSource::Recorded(r) => r.df >= RECORD_ALONE_DF,
            FloorSource::Drift => false,
        }) {
            return Some(r.clone());
        }
        [recorded, drift]
            .into_iter()
            .flatten()
            .max_by(|x, y| x.half_width_log.total_cmp(&y.half_width_log))
    }
}

/// What a comparison of two runs' latencies decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `a` is slower than `b` beyond the floor and the runs' own noise.
    Slower,
    Faster,
    /// The runs' own intervals tell them apart, but by no more than two runs of identical
    /// settings differ here (or only their slow iterations moved: the machine's load).
    WithinRunToRun,
    /// The runs' own noise already covers the difference.
    WithinRunNoise,
    /// Too few iterations for the runs' own interval.
    TooFew,
    /// No run-to-run noise is known for these runs: nothing can be claimed.
    NoFloor,
}

/// Two separately measured runs' latencies, `a` against `b`.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub ci: RatioCi,
    pub floor: Option<Floor>,
    pub verdict: Verdict,
}

impl Comparison {
    /// `a` against `b`, decided against this server's run-to-run noise (see the module
    /// docs). `None` when no ratio exists (an empty run, a non-positive median).
    pub fn of_runs(a: &Report, b: &Report) -> Option<Comparison> {
        let ci = RatioCi::of(&a.latencies(), &b.latencies())?;
        let floor = Floor::of(a, b);
        // The fast iterations' shift (p10 over p10), in ln: a run slowed by the machine's
        // load has its median pushed up while the iterations that ran undisturbed stay
        // where they were; a setting moves both.
        let fast = match (p10(&a.latencies()), p10(&b.latencies())) {
            (Some(x), Some(y)) if x > 0.0 && y > 0.0 => (x / y).ln(),
            _ => 0.0,
        };
        let d = ci.ratio.ln();
        let verdict = match (ci.side(1.0), &floor) {
            (Side::Straddles, _) if !ci.trusted() => Verdict::TooFew,
            (Side::Straddles, _) => Verdict::WithinRunNoise,
            (_, None) => Verdict::NoFloor,
            (_, Some(f)) if d.abs() <= f.half_width_log => Verdict::WithinRunToRun,
            (_, Some(f)) if fast * d.signum() <= f.half_width_log => Verdict::WithinRunToRun,
            (Side::Above, _) => Verdict::Slower,
            (_, _) => Verdict::Faster,
        };
        Some(Comparison { ci, floor, verdict })
    }

    /// Whether the two runs differ in latency, beyond every noise this server measured.
    pub fn differs(&self) -> bool {
        matches!(self.verdict, Verdict::Slower | Verdict::Faster)
    }

    /// The comparison's noise interval of the ratio: the bootstrap interval widened to the
    /// run-to-run floor around the ratio, and to ×1 where the runs do not differ for another
    /// reason this module names (only their slow iterations moved, no floor known, too few
    /// iterations). It includes ×1 exactly when [`Comparison::differs`] is false, so a
    /// prediction graded by it agrees with the reading beside it.
    pub fn noise_interval(&self) -> [f64; 2] {
        let r = self.ci.ratio;
        let h = self.floor.as_ref().map_or(0.0, |f| f.half_width_log);
        let (mut lo, mut hi) = (self.ci.lo.min(r * (-h).exp()), self.ci.hi.max(r * h.exp()));
        if !self.differs() {
            lo = lo.min(1.0);
            hi = hi.max(1.0);
        }
        [lo, hi]
    }

    /// What this comparison decides, by the one rule every page reads a ratio with
    /// ([`crate::predict::decided`] on [`Comparison::noise_interval`]): lower (`a` faster),
    /// higher (slower), about the same, or `None` — not decided: too few iterations, no
    /// run-to-run noise measured yet, or an interval so wide it holds an effect and none
    /// alike. A prediction of the change is graded by this and nothing else.
    pub fn decided(&self) -> Option<crate::Choice> {
        match self.verdict {
            Verdict::TooFew | Verdict::NoFloor => None,
            _ => {
                let [lo, hi] = self.noise_interval();
                crate::predict::decided(lo, hi)
            }
        }
    }

    fn floor_words(&self) -> String {
        match &self.floor {
            Some(f) => format!("this server's run-to-run noise (two runs of the same settings here land up to {} apart; {})", f.apart(), f.origin()),
            None => "this server's run-to-run noise (not measured for these runs yet: run the same settings twice)".into(),
        }
    }

    /// "1.04× slower", "1.20× faster", "the same"
    fn factor(&self) -> String {
        let r = self.ci.ratio;
        if r >= 1.0 {
            format!("{r:.2}× slower")
        } else {
            format!("{:.2}× faster", 1.0 / r)
        }
    }

    /// The comparison's one interval ([`Comparison::noise_interval`]) as a factor in the
    /// reading's direction: "1.22–1.40".
    fn interval(&self) -> String {
        let [lo, hi] = self.noise_interval();
        if self.ci.ratio >= 1.0 {
            format!("{lo:.2}–{hi:.2}")
        } else {
            format!("{:.2}–{:.2}", 1.0 / hi, 1.0 / lo)
        }
    }

    /// Why nothing is decided, as the clause after "not decided: " (see [`not_decided`]).
    fn undecided_cause(&self) -> String {
        let medians = format!("the medians say {}", self.factor());
        let floor = self.floor.as_ref();
        match self.verdict {
            Verdict::TooFew => format!(
                "too few iterations to tell ({} and {}; at least {MIN_SAMPLES} each)",
                self.ci.n_a, self.ci.n_b
            ),
            Verdict::NoFloor => format!("{medians}, but this server's run-to-run noise is not measured for these runs yet (run the same settings twice)"),
            // The median moved past the floor, the fast iterations did not: the load.
            Verdict::WithinRunToRun if floor.is_some_and(|f| self.ci.ratio.ln().abs() > f.half_width_log) => format!(
                "{medians}, but the fastest iterations did not move with them: the machine's load, not the setting, may have slowed one run"
            ),
            _ => {
                let within = (self.ci.hi / self.ci.lo).ln() / 2.0;
                match floor {
                    Some(f) if f.half_width_log >= within => format!("{medians}, but two runs of the same settings here differ by up to {} ({})", f.apart(), f.origin()),
                    _ => format!("{medians}, but the runs' own iterations vary too much to tell"),
                }
            }
        }
    }

    /// How people read `a`'s latency against `b`'s, by [`Comparison::decided`], with one
    /// interval: "1.31× slower (1.22–1.40), beyond this server's run-to-run noise (...)",
    /// "no difference beyond run-to-run noise: the medians are 1.04× apart, within ...", or
    /// "not decided: ...; rerun on a quieter machine, or with more iterations".
    pub fn latency_reading(&self) -> String {
        let (factor, interval) = (self.factor(), self.interval());
        match self.decided() {
            Some(crate::Choice::Lower | crate::Choice::Higher) => {
                format!("{factor} ({interval}), beyond {}", self.floor_words())
            }
            Some(_) => format!(
                "no difference beyond run-to-run noise: the medians are {} apart, within the noise ({interval}; {})",
                factor.replace(" slower", "").replace(" faster", ""),
                self.floor_words()
            ),
            None => not_decided(&self.undecided_cause()),
        }
    }

    /// The short reading written on a chart for `a` against `what` (e.g. "the previous
    /// run"), by [`Comparison::decided`]: "p50 1.20× lower than the previous run
    /// (1.12–1.29)", "p50 within run-to-run noise (±8%)", or "p50 against the previous run:
    /// not decided (noise here ±116%)".
    pub fn chart_reading(&self, what: &str) -> String {
        let c = &self.ci;
        match self.decided() {
            Some(crate::Choice::Higher) => format!("p50 {:.2}× higher than {what} ({})", c.ratio, self.interval()),
            Some(crate::Choice::Lower) => format!("p50 {:.2}× lower than {what} ({})", 1.0 / c.ratio, self.interval()),
            // Short: it must fit above a phone's plot (the legend names the run behind).
            Some(_) => match &self.floor {
                Some(f) => format!("p50 within run-to-run noise ({})", f.percent()),
                None => format!("p50 within the noise of {what}"),
            },
            None => match (self.verdict, &self.floor) {
                (Verdict::TooFew, _) => format!("p50 against {what}: not decided (too few iterations)"),
                (Verdict::NoFloor, _) | (_, None) => format!("p50 against {what}: not decided (run-to-run noise not measured yet)"),
                (_, Some(f)) => format!("p50 against {what}: not decided (noise here {})", f.percent()),
            },
        }
    }
}

/// Runs the book keeps (the newest): the floor follows the machine as it is now.
const BOOK_RUNS: usize = 400;
/// Below this many degrees of freedom a model's own repeats give way to the device's.
const MODEL_MIN_DF: u32 = 4;

struct Entry {
    device: String,
    model: String,
    /// A generation's p50 is a decode step's, a forward run's a pass's: repeats of one never
    /// speak for the other.
    generation: bool,
    settings: String,
    ln_p50: f64,
}

/// How far (in ln p50) a device's repeats may lie from a run to speak for its noise when the
/// run's own model has too few: a factor of 8. A run of sub-millisecond passes lands wholly
/// inside or outside a burst of another process's load, one of tens of milliseconds per step
/// averages over it; on a busy CI machine a tiny MLP's repeats measured ±580% while a
/// decoder's steps did not move by half that, and pooled, they hid a 2.9× effect.
const DEVICE_SCALE_LN: f64 = 2.0794415416798357; // ln 8

/// The medians of the runs a device thread measured, grouped by identical settings on the
/// same device: what [`RunToRun`] is pooled from.
#[derive(Default)]
pub struct NoiseBook {
    runs: VecDeque<Entry>,
}

fn device_key(r: &Report) -> String {
    format!("{}|{}|{}", r.env.device.as_str(), r.env.device_name, r.env.threads)
}

impl NoiseBook {
    /// Adds a finished run (one without a positive median or with too few iterations to
    /// be compared is left out).
    pub fn add(&mut self, r: &Report) {
        let p50 = r.latency_ms.p50;
        if !(p50 > 0.0) || r.samples.len() < MIN_SAMPLES {
            return;
        }
        self.runs.push_back(Entry {
            device: device_key(r),
            model: r.spec.model.to_string(),
            generation: r.spec.generate.is_some(),
            settings: serde_json::to_string(&r.spec).unwrap_or_default(),
            ln_p50: p50.ln(),
        });
        while self.runs.len() > BOOK_RUNS {
            self.runs.pop_front();
        }
    }

    /// This server's run-to-run noise for runs like `r` (same device): pooled over the
    /// model's repeats where they give [`MODEL_MIN_DF`] degrees of freedom, else over the
    /// device's repeats of the same kind of run (forward passes or a generation's steps)
    /// whose p50 lies within a factor of 8 of `r`'s ([`DEVICE_SCALE_LN`]); `None` before any
    /// such setting has been run twice.
    pub fn floor(&self, r: &Report) -> Option<RunToRun> {
        let device = device_key(r);
        let model = r.spec.model.to_string();
        let generation = r.spec.generate.is_some();
        let of_model = self.pooled(
            |e| e.device == device && e.model == model && e.generation == generation,
            |_| true,
            NoiseScope::Model,
        );
        let ln_p50 = r.latency_ms.p50.ln();
        match of_model {
            Some(m) if m.df >= MODEL_MIN_DF => Some(m),
            _ => self.pooled(
                |e| e.device == device && e.generation == generation,
                |mean| (mean - ln_p50).abs() <= DEVICE_SCALE_LN,
                NoiseScope::Device,
            ),
        }
    }

    /// Pools the groups of identical settings among the entries `keep` takes whose mean
    /// ln p50 `near` accepts.
    fn pooled(
        &self,
        keep: impl Fn(&Entry) -> bool,
        near: impl Fn(f64) -> bool,
        scope: NoiseScope,
    ) -> Option<RunToRun> {
        let mut groups: HashMap<&str, Vec<f64>> = HashMap::new();
        for e in self.runs.iter().filter(|e| keep(e)) {
            groups.entry(&e.settings).or_default().push(e.ln_p50);
        }
        let (mut ss, mut df, mut runs) = (0.0, 0u32, 0u32);
        let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
        for xs in groups.values().filter(|xs| xs.len() >= 2 && near(mean(xs))) {
            let m = xs.iter().sum::<f64>() / xs.len() as f64;
            ss += xs.iter().map(|x| (x - m).powi(2)).sum::<f64>();
            df += xs.len() as u32 - 1;
            runs += xs.len() as u32;
        }
        (df > 0).then(|| RunToRun {
            sigma_log: (ss / df as f64).sqrt(),
            df,
            runs,
            scope,
        })
    }
}

#[cfg(test)]
#[path = "noise_tests.rs"]
mod tests;
