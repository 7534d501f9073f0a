//! Latency statistics over the timed iterations, computed the way numpy does by default
//! (linear interpolation between closest ranks), so they agree with the Python peer.

use protocol::LatencyStats;

/// The `q`-th percentile (0..=100) of `sorted`, which must be sorted ascending and non-empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    debug_assert!(!sorted.is_empty());
    let rank = (q / 100.0) * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

/// Summary of latencies in milliseconds. `None` for an empty slice.
pub fn latency_stats(latencies_ms: &[f64]) -> Option<LatencyStats> {
    if latencies_ms.is_empty() {
        return None;
    }
    let mut sorted = latencies_ms.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let n = sorted.len() as f64;
    let mean = sorted.iter().sum::<f64>() / n;
    // Sample standard deviation (n - 1), 0 for a single sample.
    let stddev = if sorted.len() > 1 {
        (sorted.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    Some(LatencyStats {
        mean,
        p50: percentile(&sorted, 50.0),
        p95: percentile(&sorted, 95.0),
        p99: percentile(&sorted, 99.0),
        min: sorted[0],
        max: sorted[sorted.len() - 1],
        stddev,
        iqr: protocol::stats::iqr(&sorted),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&xs, 50.0), 2.5);
        assert_eq!(percentile(&xs, 0.0), 1.0);
        assert_eq!(percentile(&xs, 100.0), 4.0);
        assert!((percentile(&xs, 95.0) - 3.85).abs() < 1e-12);
    }

    #[test]
    fn stats_are_ordered_and_ignore_input_order() {
        let s = latency_stats(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.min, s.p50, s.max, s.mean), (1.0, 3.0, 5.0, 3.0));
        assert!(s.min <= s.p50 && s.p50 <= s.p95 && s.p95 <= s.p99 && s.p99 <= s.max);
        assert!((s.stddev - 2.5f64.sqrt()).abs() < 1e-12);
        assert!(latency_stats(&[]).is_none());
        assert_eq!(latency_stats(&[7.0]).unwrap().stddev, 0.0);
    }
}
