//! A run's latency summary over its timed iterations ([`LatencyStats`]). Its percentiles
//! and IQR are [`protocol::stats`]'s (numpy's default interpolation, so they agree with the
//! Python peer and with what the browser computes from the same samples).

use protocol::stats::{iqr, percentile};
use protocol::LatencyStats;

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
        iqr: iqr(&sorted),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
