//! Upstream's controller expectations (`ControllerExpectations` with UID tracking for
//! deletions): a controller that has just asked for N creations or for the deletion of some
//! pods waits until its informer has seen them before it compares desired and actual state
//! again, so a slow watch can never make it create or delete twice. Expectations expire after
//! five minutes, in case a watch event was lost.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long expectations are trusted (upstream's `ExpectationsTimeout`).
pub const TIMEOUT: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
struct Record {
    adds: i64,
    deletes: HashSet<String>,
    at: Instant,
}

/// Expectations per controller key (`namespace/name`).
#[derive(Debug, Default)]
pub struct Expectations {
    records: Mutex<HashMap<String, Record>>,
}

impl Expectations {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Record>) -> T) -> T {
        f(&mut self.records.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether the controller of `key` may act: it expects nothing more, expects for too long,
    /// or never recorded anything.
    pub fn satisfied(&self, key: &str) -> bool {
        self.satisfied_at(key, Instant::now())
    }

    fn satisfied_at(&self, key: &str, now: Instant) -> bool {
        self.with(|records| match records.get(key) {
            None => true,
            Some(r) => (r.adds <= 0 && r.deletes.is_empty()) || now.duration_since(r.at) > TIMEOUT,
        })
    }

    /// Expects `adds` creations (replacing what was expected before).
    pub fn expect_creations(&self, key: &str, adds: usize) {
        self.with(|records| {
            records.insert(
                key.to_owned(),
                Record {
                    adds: adds as i64,
                    deletes: HashSet::new(),
                    at: Instant::now(),
                },
            );
        })
    }

    /// Expects the deletion of the pods `pods` (`namespace/name` keys).
    pub fn expect_deletions(&self, key: &str, pods: impl IntoIterator<Item = String>) {
        self.with(|records| {
            records.insert(
                key.to_owned(),
                Record {
                    adds: 0,
                    deletes: pods.into_iter().collect(),
                    at: Instant::now(),
                },
            );
        })
    }

    /// Expects `adds` creations and the deletion of `pods` at once (replacing what was
    /// expected before), as controllers that create and delete in one sync do.
    pub fn expect(&self, key: &str, adds: usize, pods: impl IntoIterator<Item = String>) {
        self.with(|records| {
            records.insert(
                key.to_owned(),
                Record {
                    adds: adds as i64,
                    deletes: pods.into_iter().collect(),
                    at: Instant::now(),
                },
            );
        })
    }

    /// One expected creation was observed (or will never happen).
    pub fn creation_observed(&self, key: &str) {
        self.with(|records| {
            if let Some(r) = records.get_mut(key) {
                r.adds -= 1;
            }
        })
    }

    /// The deletion of `pod` was observed (or will never happen); other pods' are ignored.
    pub fn deletion_observed(&self, key: &str, pod: &str) {
        self.with(|records| {
            if let Some(r) = records.get_mut(key) {
                r.deletes.remove(pod);
            }
        })
    }

    /// Forgets `key` (its controller object is gone).
    pub fn forget(&self, key: &str) {
        self.with(|records| {
            records.remove(key);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creations_and_deletions_are_awaited() {
        let e = Expectations::default();
        assert!(e.satisfied("ns/rs"), "nothing recorded");
        e.expect_creations("ns/rs", 2);
        assert!(!e.satisfied("ns/rs"));
        e.creation_observed("ns/rs");
        assert!(!e.satisfied("ns/rs"));
        e.creation_observed("ns/rs");
        assert!(e.satisfied("ns/rs"));

        e.expect_deletions("ns/rs", ["ns/a".to_owned(), "ns/b".to_owned()]);
        assert!(!e.satisfied("ns/rs"));
        e.deletion_observed("ns/rs", "ns/a");
        e.deletion_observed("ns/rs", "ns/a");
        e.deletion_observed("ns/rs", "ns/other");
        assert!(
            !e.satisfied("ns/rs"),
            "a twice or another pod does not count for b"
        );
        e.deletion_observed("ns/rs", "ns/b");
        assert!(e.satisfied("ns/rs"));
    }

    #[test]
    fn creations_and_deletions_together() {
        let e = Expectations::default();
        e.expect("ns/ds", 1, ["ns/old".to_owned()]);
        e.creation_observed("ns/ds");
        assert!(!e.satisfied("ns/ds"), "the deletion is still awaited");
        e.deletion_observed("ns/ds", "ns/old");
        assert!(e.satisfied("ns/ds"));
    }

    #[test]
    fn expectations_expire() {
        let e = Expectations::default();
        e.expect_creations("ns/rs", 1);
        let later = Instant::now() + TIMEOUT + Duration::from_secs(1);
        assert!(!e.satisfied("ns/rs"));
        assert!(e.satisfied_at("ns/rs", later));
        e.forget("ns/rs");
        assert!(e.satisfied("ns/rs"));
    }
}
