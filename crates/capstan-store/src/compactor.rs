//! Scheduled compaction, as upstream's API server runs it against etcd: at each tick, discard the
//! history older than the revision observed at the previous tick. One interval of history (five
//! minutes upstream) is therefore always kept for watchers and paged lists to resume from.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::Store;

/// A running compaction schedule; dropping it stops the schedule.
#[derive(Debug)]
pub struct Compactor {
    handle: JoinHandle<()>,
}

impl Compactor {
    pub(crate) fn spawn(store: Store, interval: Duration) -> Self {
        let handle = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut previous: Option<i64> = None;
            loop {
                ticker.tick().await;
                let current = match store.current_revision().await {
                    Ok(revision) => revision,
                    Err(error) => {
                        tracing::warn!(%error, "compactor: cannot read the current revision");
                        continue;
                    }
                };
                if let Some(target) = previous.filter(|r| *r > 0) {
                    match store.compact(target).await {
                        Ok(()) => tracing::debug!(revision = target, "compacted"),
                        Err(error) => {
                            tracing::warn!(%error, revision = target, "compaction failed")
                        }
                    }
                }
                previous = Some(current);
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
