//! The scheduling queue (upstream's `PriorityQueue`): pods waiting for a scheduling attempt.
//!
//! - **active**: ready to be tried, highest priority first, then the longest waiting
//!   (upstream's PrioritySort);
//! - **backoff**: tried and failed recently; each pod waits 1 s doubling per attempt up to 10 s
//!   before it is active again;
//! - **unschedulable**: found to fit nowhere; it stays until a cluster event that one of the
//!   plugins that rejected it cares about (a node added, a pod gone, ...), or for at most five
//!   minutes, then goes through backoff to active. A pod that failed while such an event
//!   happened during its attempt goes to backoff at once, so the event is not lost.
//!
//! Time is passed in, never read, so the queue is tested with virtual time.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::framework::ClusterEvent;
use crate::snapshot::PodInfo;

/// Upstream's initial per-pod backoff.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Upstream's maximum per-pod backoff.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How long a pod stays unschedulable without an event (upstream's
/// `podMaxInUnschedulablePodsDuration`).
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

/// A pod in the queue with its scheduling history.
#[derive(Clone, Debug)]
pub struct QueuedPod {
    /// The pod.
    pub info: Arc<PodInfo>,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When it last entered the active queue (orders pods of equal priority).
    pub timestamp: Instant,
    /// When it was first tried (for the scheduling latency metric).
    pub initial_attempt: Option<Instant>,
    /// When it was first seen.
    pub created: Instant,
    /// The plugins that rejected it in its last attempt.
    pub rejected_by: Vec<&'static str>,
    /// The scheduling cycle of its last attempt.
    pub cycle: u64,
    /// When its last attempt ended.
    last_failure: Option<Instant>,
}

impl QueuedPod {
    /// The uid of the pod.
    pub fn uid(&self) -> &str {
        self.info.uid()
    }

    /// How long this pod backs off after its last failure.
    pub fn backoff(&self) -> Duration {
        let mut backoff = INITIAL_BACKOFF;
        for _ in 1..self.attempts {
            backoff = backoff.saturating_mul(2);
            if backoff >= MAX_BACKOFF {
                return MAX_BACKOFF;
            }
        }
        backoff.min(MAX_BACKOFF)
    }

    fn backoff_expiry(&self) -> Option<Instant> {
        self.last_failure.map(|at| at + self.backoff())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Active,
    Backoff,
    Unschedulable(Instant),
    InFlight,
}

#[derive(Debug, PartialEq, Eq)]
struct ActiveKey {
    priority: i32,
    timestamp: Instant,
    seq: u64,
    uid: String,
}

impl Ord for ActiveKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .cmp(&other.priority)
            .then_with(|| other.timestamp.cmp(&self.timestamp))
            .then_with(|| other.seq.cmp(&self.seq))
    }
}
impl PartialOrd for ActiveKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug)]
struct Entry {
    pod: QueuedPod,
    place: Place,
    /// The sequence number of its current heap entry (stale heap entries are skipped).
    seq: u64,
}

/// The queue.
#[derive(Debug, Default)]
pub struct SchedulingQueue {
    pods: HashMap<String, Entry>,
    active: BinaryHeap<ActiveKey>,
    backoff: BinaryHeap<Reverse<(Instant, u64, String)>>,
    /// The uids of the unschedulable pods (events scan only these).
    unschedulable: HashSet<String>,
    seq: u64,
    cycle: u64,
    move_request_cycle: u64,
}

impl SchedulingQueue {
    /// An empty queue.
    pub fn new() -> SchedulingQueue {
        SchedulingQueue::default()
    }

    /// How many pods the queue holds (in flight included).
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Pods by where they wait: (active, backoff, unschedulable).
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for entry in self.pods.values() {
            match entry.place {
                Place::Active => counts.0 += 1,
                Place::Backoff => counts.1 += 1,
                Place::Unschedulable(_) => counts.2 += 1,
                Place::InFlight => {}
            }
        }
        counts
    }

    /// Whether the pod is queued or being scheduled.
    pub fn contains(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn push_active(&mut self, uid: &str, now: Instant) {
        let seq = self.next_seq();
        let Some(entry) = self.pods.get_mut(uid) else {
            return;
        };
        entry.place = Place::Active;
        entry.seq = seq;
        entry.pod.timestamp = now;
        self.unschedulable.remove(uid);
        self.active.push(ActiveKey {
            priority: entry.pod.info.priority(),
            timestamp: now,
            seq,
            uid: uid.to_owned(),
        });
    }

    fn push_backoff(&mut self, uid: &str) {
        let seq = self.next_seq();
        let Some(entry) = self.pods.get_mut(uid) else {
            return;
        };
        let Some(expiry) = entry.pod.backoff_expiry() else {
            return;
        };
        entry.place = Place::Backoff;
        entry.seq = seq;
        self.unschedulable.remove(uid);
        self.backoff.push(Reverse((expiry, seq, uid.to_owned())));
    }

    /// Moves a waiting pod to backoff if its backoff has not ended, else to active.
    fn activate_or_backoff(&mut self, uid: &str, now: Instant) {
        let expiry = self.pods.get(uid).and_then(|e| e.pod.backoff_expiry());
        match expiry {
            Some(expiry) if expiry > now => self.push_backoff(uid),
            _ => self.push_active(uid, now),
        }
    }

    /// Adds a new pending pod, or updates the object of one already queued. An update to an
    /// unschedulable pod may make it schedulable, so it is moved to backoff or active.
    pub fn add(&mut self, info: Arc<PodInfo>, now: Instant) {
        let uid = info.uid().to_owned();
        if let Some(entry) = self.pods.get_mut(&uid) {
            let changed = entry.pod.info.pod.spec != info.pod.spec
                || entry.pod.info.pod.metadata.labels != info.pod.metadata.labels;
            entry.pod.info = info;
            if changed && matches!(entry.place, Place::Unschedulable(_)) {
                self.activate_or_backoff(&uid, now);
            }
            return;
        }
        self.pods.insert(
            uid.clone(),
            Entry {
                pod: QueuedPod {
                    info,
                    attempts: 0,
                    timestamp: now,
                    initial_attempt: None,
                    created: now,
                    rejected_by: Vec::new(),
                    cycle: 0,
                    last_failure: None,
                },
                place: Place::Active,
                seq: 0,
            },
        );
        self.push_active(&uid, now);
    }

    /// Forgets a pod (deleted, bound by someone else, or no longer ours).
    pub fn delete(&mut self, uid: &str) {
        self.pods.remove(uid);
        self.unschedulable.remove(uid);
    }

    fn flush_backoff(&mut self, now: Instant) {
        while let Some(Reverse((expiry, seq, uid))) = self.backoff.peek().cloned() {
            if expiry > now {
                break;
            }
            self.backoff.pop();
            if self
                .pods
                .get(&uid)
                .is_some_and(|e| e.seq == seq && e.place == Place::Backoff)
            {
                self.push_active(&uid, now);
            }
        }
    }

    /// Moves pods that have been unschedulable for longer than [`MAX_IN_UNSCHEDULABLE`].
    pub fn flush_unschedulable(&mut self, now: Instant) {
        let stale: Vec<String> = self
            .unschedulable
            .iter()
            .filter_map(|uid| self.pods.get_key_value(uid))
            .filter(|(_, e)| {
                matches!(e.place, Place::Unschedulable(since) if now.duration_since(since) >= MAX_IN_UNSCHEDULABLE)
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in stale {
            self.activate_or_backoff(&uid, now);
        }
    }

    /// The next pod to try, if any is active at `now`; it is in flight until it is requeued
    /// or [`SchedulingQueue::done`].
    pub fn pop(&mut self, now: Instant) -> Option<QueuedPod> {
        self.flush_backoff(now);
        while let Some(key) = self.active.pop() {
            let Some(entry) = self.pods.get_mut(&key.uid) else {
                continue;
            };
            if entry.seq != key.seq || entry.place != Place::Active {
                continue;
            }
            self.cycle += 1;
            entry.place = Place::InFlight;
            entry.pod.attempts += 1;
            entry.pod.cycle = self.cycle;
            entry.pod.initial_attempt.get_or_insert(now);
            return Some(entry.pod.clone());
        }
        None
    }

    /// When the earliest backoff ends, if a pod is backing off.
    pub fn next_backoff_expiry(&self) -> Option<Instant> {
        self.backoff.peek().map(|Reverse((at, _, _))| *at)
    }

    /// A pod finished its attempt successfully (assumed and being bound): it leaves the queue.
    pub fn done(&mut self, uid: &str) {
        self.delete(uid);
    }

    /// A pod fit nowhere: it waits as unschedulable for an event one of `rejected_by` cares
    /// about, or in backoff if such an event came during its attempt.
    pub fn requeue_unschedulable(
        &mut self,
        uid: &str,
        rejected_by: Vec<&'static str>,
        now: Instant,
    ) {
        let Some(entry) = self.pods.get_mut(uid) else {
            return;
        };
        entry.pod.rejected_by = rejected_by;
        entry.pod.last_failure = Some(now);
        if self.move_request_cycle >= entry.pod.cycle {
            self.push_backoff(uid);
        } else {
            entry.place = Place::Unschedulable(now);
            self.unschedulable.insert(uid.to_owned());
        }
    }

    /// A pod's attempt failed for another reason (an error, a failed binding): it backs off.
    pub fn requeue_error(&mut self, uid: &str, now: Instant) {
        let Some(entry) = self.pods.get_mut(uid) else {
            return;
        };
        entry.pod.rejected_by.clear();
        entry.pod.last_failure = Some(now);
        self.push_backoff(uid);
    }

    /// Puts back a pod that had left the queue (its binding failed): it backs off.
    pub fn readd_after_failure(&mut self, pod: QueuedPod, now: Instant) {
        let uid = pod.uid().to_owned();
        self.pods.insert(
            uid.clone(),
            Entry {
                pod,
                place: Place::InFlight,
                seq: 0,
            },
        );
        self.requeue_error(&uid, now);
    }

    /// A cluster event happened: unschedulable pods that a plugin caring about it rejected
    /// (`interested` answers for each plugin name) are moved to backoff or active.
    pub fn on_event(
        &mut self,
        event: ClusterEvent,
        interested: impl Fn(&'static str, ClusterEvent) -> bool,
        now: Instant,
    ) {
        self.move_request_cycle = self.cycle;
        let moving: Vec<String> = self
            .unschedulable
            .iter()
            .filter_map(|uid| self.pods.get_key_value(uid))
            .filter(|(_, e)| matches!(e.place, Place::Unschedulable(_)))
            .filter(|(_, e)| {
                e.pod.rejected_by.is_empty()
                    || e.pod.rejected_by.iter().any(|p| interested(p, event))
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in moving {
            self.activate_or_backoff(&uid, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::test_util::pod;
    use serde_json::json;

    fn prio(name: &str, priority: i32) -> Arc<PodInfo> {
        pod(name, json!({}), json!({"priority": priority}))
    }

    fn names(queue: &mut SchedulingQueue, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(p) = queue.pop(now) {
            out.push(p.info.name().to_owned());
            queue.done(p.uid());
        }
        out
    }

    #[test]
    fn higher_priority_first_then_oldest() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(prio("low", 0), t0);
        q.add(prio("high", 100), t0 + Duration::from_millis(2));
        q.add(prio("low2", 0), t0 + Duration::from_millis(1));
        assert_eq!(
            names(&mut q, t0 + Duration::from_millis(3)),
            ["high", "low", "low2"]
        );
    }

    #[test]
    fn backoff_doubles_to_ten_seconds() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(prio("a", 0), t0);
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..6 {
            let p = q.pop(now).unwrap_or_else(|| panic!("no pod at {now:?}"));
            q.requeue_error(p.uid(), now);
            let expiry = q.next_backoff_expiry().unwrap_or(now);
            waits.push(expiry.duration_since(now).as_secs());
            // Not poppable a moment before it ends, poppable when it does.
            assert!(q.pop(expiry - Duration::from_millis(1)).is_none());
            now = expiry;
        }
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn unschedulable_pods_wait_for_an_interesting_event() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(prio("a", 0), t0);
        let p = q.pop(t0).unwrap_or_else(|| panic!("empty"));
        q.requeue_unschedulable(p.uid(), vec!["NodeResourcesFit"], t0);
        assert_eq!(q.counts(), (0, 0, 1));
        let later = t0 + Duration::from_secs(30);
        // An event the rejecting plugin does not care about leaves it there.
        q.on_event(
            ClusterEvent::NodeAdd,
            |_, e| e == ClusterEvent::AssignedPodDelete,
            later,
        );
        assert!(q.pop(later).is_none());
        // One it cares about moves it; its 1 s backoff has long ended.
        q.on_event(
            ClusterEvent::AssignedPodDelete,
            |_, e| e == ClusterEvent::AssignedPodDelete,
            later,
        );
        assert_eq!(names(&mut q, later), ["a"]);
    }

    #[test]
    fn an_event_during_the_attempt_is_not_lost() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(prio("a", 0), t0);
        let p = q.pop(t0).unwrap_or_else(|| panic!("empty"));
        q.on_event(ClusterEvent::NodeAdd, |_, _| true, t0);
        q.requeue_unschedulable(p.uid(), vec!["NodeAffinity"], t0);
        assert_eq!(q.counts(), (0, 1, 0));
        assert_eq!(names(&mut q, t0 + Duration::from_secs(1)), ["a"]);
    }

    #[test]
    fn unschedulable_pods_are_retried_after_five_minutes() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(prio("a", 0), t0);
        let p = q.pop(t0).unwrap_or_else(|| panic!("empty"));
        q.requeue_unschedulable(p.uid(), vec!["NodeAffinity"], t0);
        q.flush_unschedulable(t0 + Duration::from_secs(299));
        assert!(q.pop(t0 + Duration::from_secs(299)).is_none());
        q.flush_unschedulable(t0 + MAX_IN_UNSCHEDULABLE);
        assert_eq!(names(&mut q, t0 + MAX_IN_UNSCHEDULABLE), ["a"]);
    }

    #[test]
    fn updating_an_unschedulable_pod_retries_it() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(prio("a", 0), t0);
        let p = q.pop(t0).unwrap_or_else(|| panic!("empty"));
        q.requeue_unschedulable(p.uid(), vec!["NodeAffinity"], t0);
        // The same object again changes nothing.
        q.add(prio("a", 0), t0 + Duration::from_secs(5));
        assert!(q.pop(t0 + Duration::from_secs(5)).is_none());
        let changed = pod("a", json!({"new": "label"}), json!({"priority": 0}));
        q.add(changed, t0 + Duration::from_secs(5));
        assert_eq!(names(&mut q, t0 + Duration::from_secs(5)), ["a"]);
        // Deleted pods are gone.
        q.add(prio("b", 0), t0);
        q.delete("b");
        assert!(q.is_empty());
    }
}
