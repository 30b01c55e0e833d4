//! A priority level: its seats and its queues. A request takes a free seat at once when nobody
//! is waiting; otherwise it joins the shortest queue of its flow's hand (a few queues dealt from
//! the flow's hash, so that flows share queues only by chance) unless that queue is full, and
//! waits until a seat frees and its queue's turn comes, or until the wait limit passes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::flowcontrol::v1::PriorityLevelConfigurationSpec;
use tokio::sync::oneshot;

/// How a level limits its requests.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Limit {
    /// Never limited.
    Exempt,
    /// At most `seats` at once; the rest are rejected.
    Reject { seats: usize },
    /// At most `seats` at once; the rest wait in `queues` queues of at most `length`, each flow
    /// in the shortest of its `hand`.
    Queue {
        seats: usize,
        queues: usize,
        hand: usize,
        length: usize,
    },
}

/// Why a request was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rejected {
    /// The level rejects what does not fit, or the flow's queue is full.
    Full,
    /// The request waited in its queue for the whole wait limit.
    TimedOut,
}

#[derive(Debug, Default)]
struct State {
    executing: usize,
    queues: Vec<VecDeque<oneshot::Sender<Seat>>>,
    /// The queue whose turn is next.
    next: usize,
}

impl State {
    fn waiting(&self) -> bool {
        self.queues.iter().any(|q| !q.is_empty())
    }
}

/// One priority level.
#[derive(Debug)]
pub(crate) struct Level {
    name: String,
    uid: String,
    limit: Limit,
    state: Mutex<State>,
}

/// A seat taken at a level; giving it back lets the next waiter in. A seat handed to a waiter
/// that has gone comes back the same way.
#[derive(Debug)]
pub(crate) struct Seat(Option<Arc<Level>>);

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(level) = self.0.take() {
            level.release();
        }
    }
}

fn positive(value: Option<i32>, default: usize) -> usize {
    value
        .and_then(|v| usize::try_from(v).ok())
        .filter(|v| *v > 0)
        .unwrap_or(default)
}

/// A small pseudo-random sequence (SplitMix64) seeded by a flow's hash: the deal of its hand.
struct Deal(u64);

impl Deal {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        usize::try_from(z % u64::try_from(below.max(1)).unwrap_or(1)).unwrap_or(0)
    }
}

/// `hand` distinct queues out of `deck`, dealt from `flow`.
fn hand_of(flow: u64, deck: usize, hand: usize) -> Vec<usize> {
    let mut deal = Deal(flow);
    let mut cards: Vec<usize> = Vec::with_capacity(hand);
    while cards.len() < hand.min(deck) {
        let card = deal.next(deck);
        if !cards.contains(&card) {
            cards.push(card);
        }
    }
    cards
}

impl Level {
    /// A level configured by `spec`, with `seats` seats when it is limited.
    pub(crate) fn new(
        name: &str,
        uid: &str,
        spec: Option<&PriorityLevelConfigurationSpec>,
        seats: usize,
    ) -> Level {
        let limit = match spec {
            Some(spec) if spec.type_ == "Limited" => {
                let response = spec
                    .limited
                    .as_ref()
                    .and_then(|l| l.limit_response.as_ref());
                match response.and_then(|r| r.queuing.as_ref()) {
                    Some(q) if response.is_some_and(|r| r.type_ == "Queue") => Limit::Queue {
                        seats,
                        queues: positive(q.queues, 64),
                        hand: positive(q.hand_size, 8),
                        length: positive(q.queue_length_limit, 50),
                    },
                    _ => Limit::Reject { seats },
                }
            }
            _ => Limit::Exempt,
        };
        let queues = match limit {
            Limit::Queue { queues, .. } => queues,
            _ => 0,
        };
        Level {
            name: name.to_owned(),
            uid: uid.to_owned(),
            limit,
            state: Mutex::new(State {
                queues: (0..queues).map(|_| VecDeque::new()).collect(),
                ..State::default()
            }),
        }
    }

    /// The level's uid.
    pub(crate) fn uid(&self) -> &str {
        &self.uid
    }

    /// Whether `other` is configured the same (it can then replace this one unnoticed).
    pub(crate) fn same_as(&self, other: &Level) -> bool {
        self.name == other.name && self.uid == other.uid && self.limit == other.limit
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a seat for a request of `flow`: `None` at an exempt level.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        flow: u64,
        wait_limit: Duration,
    ) -> Result<Option<Seat>, Rejected> {
        let (seats, queues, hand, length) = match self.limit {
            Limit::Exempt => return Ok(None),
            Limit::Reject { seats } => (seats, 0, 0, 0),
            Limit::Queue {
                seats,
                queues,
                hand,
                length,
            } => (seats, queues, hand, length),
        };
        let receiver = {
            let mut state = self.lock();
            if state.executing < seats && !state.waiting() {
                state.executing += 1;
                return Ok(Some(Seat(Some(self.clone()))));
            }
            if queues == 0 {
                return Err(Rejected::Full);
            }
            let cards = hand_of(flow, queues, hand);
            for card in &cards {
                state.queues[*card].retain(|waiter| !waiter.is_closed());
            }
            let Some(shortest) = cards
                .iter()
                .copied()
                .min_by_key(|card| state.queues[*card].len())
            else {
                return Err(Rejected::Full);
            };
            if state.queues[shortest].len() >= length {
                return Err(Rejected::Full);
            }
            let (sender, receiver) = oneshot::channel();
            state.queues[shortest].push_back(sender);
            receiver
        };
        let mut receiver = receiver;
        match tokio::time::timeout(wait_limit, &mut receiver).await {
            Ok(Ok(seat)) => Ok(Some(seat)),
            Ok(Err(_)) => Err(Rejected::TimedOut),
            Err(_) => {
                // The seat may have been handed over just as the wait ended: take it then, and
                // close the way in while nothing can be handed over.
                let state = self.lock();
                let seat = receiver.try_recv().ok();
                drop(receiver);
                drop(state);
                seat.map(Some).ok_or(Rejected::TimedOut)
            }
        }
    }

    /// Gives a seat back and hands free seats to the waiters whose queues' turns come.
    fn release(self: &Arc<Self>) {
        let mut state = self.lock();
        state.executing = state.executing.saturating_sub(1);
        let seats = match self.limit {
            Limit::Queue { seats, .. } | Limit::Reject { seats } => seats,
            Limit::Exempt => return,
        };
        let count = state.queues.len();
        while state.executing < seats && state.waiting() {
            let turn = state.next % count.max(1);
            state.next = (turn + 1) % count.max(1);
            if let Some(waiter) = state.queues[turn].pop_front() {
                state.executing += 1;
                if let Err(mut seat) = waiter.send(Seat(Some(self.clone()))) {
                    // The waiter is gone: the seat stays free (and must not come back here).
                    seat.0 = None;
                    state.executing -= 1;
                }
            }
        }
    }

    /// Requests executing and waiting now.
    #[cfg(test)]
    pub(crate) fn load(&self) -> (usize, usize) {
        let state = self.lock();
        let waiting = state
            .queues
            .iter()
            .map(|q| q.iter().filter(|w| !w.is_closed()).count())
            .sum();
        (state.executing, waiting)
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    /// The queues a flow is dealt.
    pub(crate) fn hand(flow: u64, deck: usize, hand: usize) -> Vec<usize> {
        super::hand_of(flow, deck, hand)
    }
}
