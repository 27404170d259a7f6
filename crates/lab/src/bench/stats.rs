//! The bench's arithmetic, pure: least-squares slopes (the per-hop cost is the slope of p50
//! against hops), medians and min–max spreads across runs. No I/O, no clock.

use serde::Serialize;

/// Slope of the least-squares line through `points` (x, y); `None` with fewer than two
/// distinct x values.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 {
        return None;
    }
    Some(sxy / sxx)
}

/// The median and range of a few values (one per run).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// How many values (runs) it summarises.
    pub n: usize,
}

impl Spread {
    /// `None` for no values; NaNs are ignored.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }
}

/// The order of `count` configurations in run `run` of `runs`: rotated so each run starts
/// elsewhere and a busy minute lands on every configuration.
pub fn rotation(count: usize, run: usize, runs: usize) -> Vec<usize> {
    if count == 0 {
        return Vec::new();
    }
    let step = count.div_ceil(runs.max(1)).max(1);
    let start = (run * step) % count;
    (0..count).map(|i| (start + i) % count).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_straight_line_is_exact() {
        let pts: Vec<(f64, f64)> = (0..5).map(|h| (h as f64, 20.0 + 60.0 * h as f64)).collect();
        assert!((slope(&pts).unwrap() - 60.0).abs() < 1e-9);
    }

    #[test]
    fn slope_is_least_squares_through_noise() {
        // y = 1, 3, 2, 5, 4 over x = 0..4: sxy = 8, sxx = 10.
        let pts = [(0.0, 1.0), (1.0, 3.0), (2.0, 2.0), (3.0, 5.0), (4.0, 4.0)];
        assert!((slope(&pts).unwrap() - 0.8).abs() < 1e-12);
        // Two points: the difference.
        assert_eq!(slope(&[(0.0, 10.0), (1.0, 70.0)]), Some(60.0));
    }

    #[test]
    fn slope_needs_two_distinct_x() {
        assert_eq!(slope(&[]), None);
        assert_eq!(slope(&[(1.0, 2.0)]), None);
        assert_eq!(slope(&[(1.0, 2.0), (1.0, 3.0)]), None);
    }

    #[test]
    fn spread_is_median_min_max() {
        let s = Spread::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (3.0, 1.0, 5.0, 3));
        let s = Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[f64::NAN, 2.0]).unwrap().n, 1);
    }

    #[test]
    fn rotation_visits_every_configuration_once_per_run_and_moves() {
        for run in 0..5 {
            let mut order = rotation(9, run, 5);
            assert_eq!(order.len(), 9);
            order.sort();
            assert_eq!(order, (0..9).collect::<Vec<_>>());
        }
        let firsts: Vec<usize> = (0..5).map(|r| rotation(9, r, 5)[0]).collect();
        assert_eq!(firsts, vec![0, 2, 4, 6, 8]);
        assert!(rotation(0, 3, 5).is_empty());
    }
}
