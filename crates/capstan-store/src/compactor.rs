//! Scheduled compaction, as upstream's API server runs it against etcd (`etcd3/compact.go`):
//! every interval, one turn ([`crate::Store::compact_turn`]) discards the history older than the
//! revision observed at the previous turn. One interval of history (five minutes upstream) is
//! therefore always kept for watchers and paged lists to resume from, and the first compaction
//! comes two intervals after the start.
//!
//! Several servers on one etcd share the schedule through the compaction key's version: a
//! server takes a turn only if nobody took one since its previous turn, so one of them
//! compacts per interval; when one stops, another takes over within two intervals.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::{CompactOutcome, Revision, Store};

/// A running compaction schedule; dropping it stops the schedule.
#[derive(Debug)]
pub struct Compactor {
    handle: JoinHandle<()>,
}

impl Compactor {
    pub(crate) fn spawn(store: Store, interval: Duration) -> Self {
        let handle = tokio::spawn(async move {
            // The schedule's version and the revision as of this server's previous turn.
            let mut version: i64 = 0;
            let mut revision: Revision = 0;
            loop {
                tokio::time::sleep(interval).await;
                let turn = match store.compact_turn(version, revision).await {
                    Ok(turn) => turn,
                    Err(error) => {
                        tracing::warn!(%error, "compactor: cannot take a compaction turn");
                        continue;
                    }
                };
                version = turn.version;
                revision = turn.revision;
                match turn.outcome {
                    CompactOutcome::Compacted(target) => {
                        tracing::debug!(revision = target, "compacted")
                    }
                    CompactOutcome::Skipped => {}
                    CompactOutcome::TakenElsewhere(recorded) => {
                        tracing::debug!(?recorded, "another server took the compaction turn")
                    }
                    CompactOutcome::Failed(error) => {
                        tracing::warn!(%error, "compaction failed")
                    }
                }
            }
        });
        Compactor { handle }
    }

    /// Stops the schedule.
    pub fn stop(self) {}
}

impl Drop for Compactor {
    fn drop(&mut self) {
        self.handle.abort();
    }
}
