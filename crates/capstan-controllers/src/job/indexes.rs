//! Completion-index bookkeeping for Indexed Jobs (upstream's `indexed_job_utils.go`): the
//! compressed interval lists of `status.completedIndexes` ("0-2,5"), the indexes still to
//! run, and which active pods repeat an index or carry none.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;

/// The annotation (and, since 1.28, label) holding a pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// The environment variable a pod's containers read their index from.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// An inclusive run of indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// The first index.
    pub first: usize,
    /// The last index (inclusive).
    pub last: usize,
}

/// Sorted, disjoint, non-adjacent intervals (upstream's `orderedIntervals`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intervals(pub Vec<Interval>);

impl Intervals {
    /// Parses `status.completedIndexes`, dropping what lies at or beyond `completions` and
    /// skipping corrupt parts, as upstream does.
    pub fn parse(text: &str, completions: usize) -> Intervals {
        let mut out: Vec<Interval> = Vec::new();
        if text.is_empty() {
            return Intervals(out);
        }
        for part in text.split(',') {
            let mut limits = part.split('-');
            let Some(Ok(first)) = limits.next().map(str::parse::<usize>) else {
                continue;
            };
            if first >= completions {
                break;
            }
            let last = match limits.next() {
                None => first,
                Some(l) => match l.parse::<usize>() {
                    Ok(l) => l.min(completions - 1),
                    Err(_) => continue,
                },
            };
            match out.last_mut() {
                Some(prev) if prev.last + 1 == first => prev.last = last,
                _ => out.push(Interval { first, last }),
            }
        }
        Intervals(out)
    }

    /// These intervals merged with `other`.
    pub fn merge(&self, other: &Intervals) -> Intervals {
        let mut all: Vec<Interval> = self.0.iter().chain(other.0.iter()).copied().collect();
        all.sort_by_key(|i| i.first);
        let mut out: Vec<Interval> = Vec::new();
        for interval in all {
            match out.last_mut() {
                Some(prev) if interval.first <= prev.last + 1 => {
                    prev.last = prev.last.max(interval.last)
                }
                _ => out.push(interval),
            }
        }
        Intervals(out)
    }

    /// These intervals with `indexes` added.
    pub fn with_indexes(&self, indexes: impl IntoIterator<Item = usize>) -> Intervals {
        let singles = indexes
            .into_iter()
            .map(|i| Interval { first: i, last: i })
            .collect();
        self.merge(&Intervals(singles))
    }

    /// How many indexes the intervals hold.
    pub fn total(&self) -> usize {
        self.0.iter().map(|i| i.last - i.first + 1).sum()
    }

    /// Whether `index` is in one of the intervals.
    pub fn has(&self, index: usize) -> bool {
        self.0.iter().any(|i| i.first <= index && index <= i.last)
    }
}

/// Upstream's format: runs of three or more as `a-b`, a pair as `a,b`.
impl fmt::Display for Intervals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, i) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", i.first)?;
            if i.last == i.first + 1 {
                write!(f, ",{}", i.last)?;
            } else if i.last > i.first {
                write!(f, "-{}", i.last)?;
            }
        }
        Ok(())
    }
}

/// A pod's completion index, if it carries a valid one.
pub fn completion_index(pod: &Pod) -> Option<usize> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(COMPLETION_INDEX)?
        .parse::<i64>()
        .ok()
        .and_then(|i| usize::try_from(i).ok())
}

/// The first `count` indexes below `completions` that are neither done nor taken
/// (`taken`: succeeded indexes plus those of active pods, and of terminating pods when only
/// failed pods are replaced).
pub fn first_pending(taken: &Intervals, count: usize, completions: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(count.min(completions));
    let mut candidate = 0;
    for interval in &taken.0 {
        while candidate < completions && out.len() < count && candidate < interval.first {
            out.push(candidate);
            candidate += 1;
        }
        candidate = candidate.max(interval.last + 1);
    }
    while candidate < completions && out.len() < count {
        out.push(candidate);
        candidate += 1;
    }
    out
}

/// The indexes of `pods` that carry one.
pub fn indexes_of<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeSet<usize> {
    pods.into_iter().filter_map(completion_index).collect()
}

/// Upstream's `appendDuplicatedIndexPodsForRemoval`: among active pods, those without a
/// valid index or with one at or beyond `completions`, and all but one per repeated index
/// (keeping the one that matters most, deleting in [`crate::pods::delete_first`] order).
/// Returns (to remove, the rest).
pub fn duplicates_for_removal<'a>(
    pods: &[&'a Pod],
    completions: usize,
    now: k8s_openapi::jiff::Timestamp,
) -> (Vec<&'a Pod>, Vec<&'a Pod>) {
    let mut by_index: std::collections::BTreeMap<usize, Vec<&'a Pod>> = Default::default();
    let mut remove = Vec::new();
    for pod in pods {
        match completion_index(pod) {
            Some(i) if i < completions => by_index.entry(i).or_default().push(pod),
            _ => remove.push(*pod),
        }
    }
    let mut keep = Vec::new();
    for (_, group) in by_index {
        if group.len() == 1 {
            keep.extend(group);
            continue;
        }
        let surplus = crate::pods::pods_to_delete(&group, &group, group.len() - 1, now);
        for pod in &group {
            if surplus.iter().any(|s| std::ptr::eq(*s, *pod)) {
                remove.push(*pod);
            } else {
                keep.push(*pod);
            }
        }
    }
    (remove, keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format() {
        let check = |text: &str, completions: usize, want: &str, total: usize| {
            let parsed = Intervals::parse(text, completions);
            assert_eq!(parsed.to_string(), want, "{text:?} with {completions}");
            assert_eq!(parsed.total(), total, "{text:?}");
        };
        check("", 5, "", 0);
        check("0-2,5", 10, "0-2,5", 4);
        check("1,2", 10, "1,2", 2);
        check("1,2,3", 10, "1-3", 3);
        check("0-2,3-4", 10, "0-4", 5);
        check("0-2,7-9", 8, "0-2,7", 4);
        check("0-2,x,5", 10, "0-2,5", 4);
        check("9", 5, "", 0);
    }

    #[test]
    fn merge_and_add() {
        let base = Intervals::parse("0-2,5", 10);
        assert_eq!(base.with_indexes([3, 7, 8]).to_string(), "0-3,5,7,8");
        assert_eq!(base.with_indexes([4]).to_string(), "0-2,4,5");
        assert_eq!(base.with_indexes([4, 3]).to_string(), "0-5");
        assert_eq!(base.with_indexes([]).to_string(), "0-2,5");
        assert!(base.has(1) && base.has(5) && !base.has(3));
    }

    #[test]
    fn pending_indexes_skip_taken_ones() {
        let taken = Intervals::parse("0-2,5", 10);
        assert_eq!(first_pending(&taken, 3, 10), [3, 4, 6]);
        assert_eq!(first_pending(&taken, 10, 7), [3, 4, 6]);
        assert_eq!(first_pending(&Intervals::default(), 2, 10), [0, 1]);
        assert_eq!(first_pending(&taken, 0, 10), Vec::<usize>::new());
    }
}
