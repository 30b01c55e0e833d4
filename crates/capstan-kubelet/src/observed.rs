//! Durations observed as they happen, kept as a histogram (cumulated when written in the
//! Prometheus formats): the pod workers record pod start-up times, the kubelet API writes them
//! (`kubelet_pod_start_duration_seconds`). Apart from `stats` so that the pod workers need
//! not import it.

use capstan_client::prometheus::Sample;

/// A histogram of durations observed as they happen (cumulative bucket counts are computed
/// when written).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    state: std::sync::Mutex<(Vec<u64>, u64, f64)>,
}

impl Histogram {
    /// An empty histogram with the upper `bounds` (ascending; `+Inf` is implied).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            state: std::sync::Mutex::new((vec![0; bounds.len()], 0, 0.0)),
        }
    }

    /// Records one observation of `seconds`.
    pub fn observe(&self, seconds: f64) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(bucket) = self.bounds.iter().position(|b| seconds <= *b) {
            state.0[bucket] += 1;
        }
        state.1 += 1;
        state.2 += seconds;
    }

    /// The histogram's samples (`_bucket` per bound and `+Inf`, `_sum`, `_count`) with `labels`.
    pub(crate) fn samples(&self, labels: &[(&str, &str)]) -> Vec<Sample> {
        let (buckets, count, sum) = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        histogram_samples(labels, self.bounds, &buckets, count, sum)
    }
}

/// A histogram's samples from its per-bucket (not cumulated) counts.
pub(crate) fn histogram_samples(
    labels: &[(&str, &str)],
    bounds: &[f64],
    buckets: &[u64],
    count: u64,
    sum: f64,
) -> Vec<Sample> {
    let mut samples = Vec::with_capacity(bounds.len() + 3);
    let mut cumulated = 0;
    let les = bounds
        .iter()
        .map(|b| capstan_client::prometheus::go_float(*b))
        .chain(std::iter::once("+Inf".to_owned()));
    for (i, le) in les.enumerate() {
        cumulated += buckets.get(i).copied().unwrap_or(0);
        let value = if i == bounds.len() { count } else { cumulated };
        let mut with_le = labels.to_vec();
        with_le.push(("le", &le));
        samples.push(Sample {
            suffix: "_bucket",
            ..Sample::new(&with_le, value as f64)
        });
    }
    samples.push(Sample {
        suffix: "_sum",
        ..Sample::new(labels, sum)
    });
    samples.push(Sample {
        suffix: "_count",
        ..Sample::new(labels, count as f64)
    });
    samples
}
