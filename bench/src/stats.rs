//! Small statistics helpers: medians of runs, percentiles of samples.

use std::time::Duration;

/// The median of `values` (the mean of the middle two for an even count); 0 when empty.
pub(crate) fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// The `p`-th percentile (0..=100) of `samples`, nearest rank; zero when empty.
pub(crate) fn percentile(samples: &[Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The largest sample; zero when empty.
pub(crate) fn max(samples: &[Duration]) -> Duration {
    samples.iter().copied().max().unwrap_or_default()
}

/// Microseconds, for reports.
pub(crate) fn us(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// Lock+unlock pairs per second from an acquire rate and a release rate: one pair
/// costs one of each, so the times add up.
pub(crate) fn pair_rate(acquire: f64, release: f64) -> f64 {
    if acquire <= 0.0 || release <= 0.0 {
        return 0.0;
    }
    1.0 / (1.0 / acquire + 1.0 / release)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_percentiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&samples, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&samples, 100.0), Duration::from_millis(100));
        assert_eq!(max(&samples), Duration::from_millis(100));
        assert!((pair_rate(100.0, 100.0) - 50.0).abs() < 1e-9);
    }
}
