//! Node ports as one bitmap in the datastore, as upstream keeps them: a `RangeAllocation`
//! (`range` and base64 `data`, bit `i` for port `low + i`, big-endian as Go's `big.Int`
//! writes it) at [`KEY`], changed only by a write conditional on the revision it was read at.
//! A server that loses the race reads the bitmap again and retries, so servers sharing one
//! datastore never hand out a port twice. Within one server the changes take turns (one lock),
//! so that its own requests do not race each other.

use std::collections::BTreeSet;

use base64::Engine;
use capstan_store::{Revision, Store, StoreError};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::status::ApiError;

/// Where the bitmap is stored (upstream's key).
pub(crate) const KEY: &str = "/registry/ranges/servicenodeports";

/// How many times a change is tried before giving up on a busy datastore.
const MAX_TRIES: usize = 64;

/// The ports of a range that are held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bitmap {
    low: u16,
    high: u16,
    held: BTreeSet<u16>,
}

impl Bitmap {
    pub(crate) fn empty(low: u16, high: u16) -> Self {
        Bitmap {
            low,
            high,
            held: BTreeSet::new(),
        }
    }

    /// Whether `port` is in the range.
    pub(crate) fn in_range(&self, port: u16) -> bool {
        (self.low..=self.high).contains(&port)
    }

    pub(crate) fn has(&self, port: u16) -> bool {
        self.held.contains(&port)
    }

    pub(crate) fn set(&mut self, port: u16) {
        self.held.insert(port);
    }

    pub(crate) fn clear(&mut self, port: u16) {
        self.held.remove(&port);
    }

    /// The held ports.
    pub(crate) fn held(&self) -> &BTreeSet<u16> {
        &self.held
    }

    /// A random free port, if any.
    pub(crate) fn random_free(&self) -> Option<u16> {
        let span = u32::from(self.high - self.low) + 1;
        let start = rand::random_range(0..span);
        (0..span)
            .filter_map(|i| u16::try_from(u32::from(self.low) + (start + i) % span).ok())
            .find(|p| !self.held.contains(p))
    }

    /// The `RangeAllocation` that stores it.
    fn encode(&self) -> Vec<u8> {
        let bits = u32::from(self.high - self.low) + 1;
        let mut bytes = vec![0u8; bits.div_ceil(8) as usize];
        let last = bytes.len() - 1;
        for port in &self.held {
            let bit = usize::from(port - self.low);
            bytes[last - bit / 8] |= 1 << (bit % 8);
        }
        let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes[first..]);
        serde_json::to_vec(&json!({
            "kind": "RangeAllocation",
            "apiVersion": "v1",
            "metadata": {"creationTimestamp": null},
            "range": format!("{}-{}", self.low, self.high),
            "data": data,
        }))
        .unwrap_or_default()
    }

    /// The bitmap of a stored `RangeAllocation`, for the range `low..=high` (held ports
    /// outside it are dropped, as upstream does when the range changes).
    fn decode(bytes: &[u8], low: u16, high: u16) -> Result<Self, String> {
        let stored: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let stored_low = stored["range"]
            .as_str()
            .and_then(|r| r.split_once('-'))
            .and_then(|(low, _)| low.parse::<u32>().ok())
            .ok_or("the stored node port range is malformed")?;
        let data = base64::engine::general_purpose::STANDARD
            .decode(stored["data"].as_str().unwrap_or_default())
            .map_err(|e| e.to_string())?;
        let mut bitmap = Bitmap::empty(low, high);
        for (i, byte) in data.iter().rev().enumerate() {
            for bit in 0..8 {
                if byte & (1 << bit) != 0 {
                    let port = stored_low + u32::try_from(i * 8 + bit).unwrap_or(u32::MAX);
                    if let Ok(port) = u16::try_from(port)
                        && bitmap.in_range(port)
                    {
                        bitmap.set(port);
                    }
                }
            }
        }
        Ok(bitmap)
    }
}

/// The node port allocator.
#[derive(Debug)]
pub(crate) struct PortAllocator {
    pub low: u16,
    pub high: u16,
    store: Store,
    turn: Mutex<()>,
}

fn unavailable(message: &str) -> ApiError {
    capstan_api::StatusError::service_unavailable(message).into()
}

impl PortAllocator {
    pub(crate) fn new(store: Store, (low, high): (u16, u16)) -> Self {
        PortAllocator {
            low,
            high,
            store,
            turn: Mutex::new(()),
        }
    }

    /// The stored bitmap and the revision it was read at (`None`: nothing is stored yet).
    pub(crate) async fn read(&self) -> Result<(Bitmap, Option<Revision>), ApiError> {
        let got = self
            .store
            .get(KEY, None)
            .await
            .map_err(|e| unavailable(&e.to_string()))?;
        match got.kv {
            Some(kv) => {
                let bitmap = Bitmap::decode(&kv.value, self.low, self.high)
                    .map_err(|e| capstan_api::StatusError::internal(&e))?;
                Ok((bitmap, Some(kv.mod_revision)))
            }
            None => Ok((Bitmap::empty(self.low, self.high), None)),
        }
    }

    /// Writes `bitmap` if the stored one is still at `revision`; `false` when it changed.
    pub(crate) async fn write(
        &self,
        bitmap: &Bitmap,
        revision: Option<Revision>,
    ) -> Result<bool, ApiError> {
        let written = match revision {
            Some(revision) => {
                self.store
                    .update(KEY, bitmap.encode(), Some(revision))
                    .await
            }
            None => self.store.create(KEY, bitmap.encode()).await,
        };
        match written {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict { .. } | StoreError::AlreadyExists { .. })
            | Err(StoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(unavailable(&e.to_string())),
        }
    }

    /// Applies `change` to the stored bitmap, read again and retried until the write is not
    /// raced; `change` returns what the caller gets, and nothing is written when it fails or
    /// leaves the bitmap as it was. With `dry_run` nothing is written either.
    pub(crate) async fn change<T, E: From<ApiError>>(
        &self,
        dry_run: bool,
        mut change: impl FnMut(&mut Bitmap) -> Result<T, E>,
    ) -> Result<T, E> {
        let _turn = self.turn.lock().await;
        for _ in 0..MAX_TRIES {
            let (mut bitmap, revision) = self.read().await?;
            let before = bitmap.clone();
            let result = change(&mut bitmap)?;
            if dry_run || bitmap == before || self.write(&bitmap, revision).await? {
                return Ok(result);
            }
        }
        Err(unavailable("the node port allocation is too busy; try again").into())
    }

    /// Frees `ports` (a Service that held them was deleted, or no longer wants them, or the
    /// write that took them failed).
    pub(crate) async fn release(&self, ports: &[u16]) {
        if ports.is_empty() {
            return;
        }
        let released = self
            .change(false, |bitmap| {
                for port in ports {
                    bitmap.clear(*port);
                }
                Ok::<(), ApiError>(())
            })
            .await;
        if let Err(error) = released {
            tracing::warn!(?ports, error = ?error.status().to_json(), "cannot release node ports");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bitmap_round_trips_as_upstream_stores_it() {
        let mut bitmap = Bitmap::empty(30000, 32767);
        assert_eq!(
            serde_json::from_slice::<Value>(&bitmap.encode()).unwrap()["data"],
            ""
        );
        bitmap.set(30000);
        bitmap.set(30009);
        bitmap.set(32767);
        let stored: Value = serde_json::from_slice(&bitmap.encode()).unwrap();
        assert_eq!(stored["range"], "30000-32767");
        let data = base64::engine::general_purpose::STANDARD
            .decode(stored["data"].as_str().unwrap())
            .unwrap();
        // big.Int bytes: the highest bit (port 32767, bit 2767) leads, no leading zero byte.
        assert_eq!(data.len(), 2767 / 8 + 1);
        assert_eq!(data[0], 1 << (2767 % 8));
        assert_eq!(data[data.len() - 1], 1);
        assert_eq!(data[data.len() - 2], 1 << 1);
        let back = Bitmap::decode(&bitmap.encode(), 30000, 32767).unwrap();
        assert_eq!(back, bitmap);
        // A narrower range keeps what fits.
        let narrow = Bitmap::decode(&bitmap.encode(), 30000, 30100).unwrap();
        assert_eq!(
            narrow.held().iter().copied().collect::<Vec<_>>(),
            [30000, 30009]
        );
    }

    #[test]
    fn a_random_free_port_is_free() {
        let mut bitmap = Bitmap::empty(30000, 30003);
        for port in [30000, 30001, 30003] {
            bitmap.set(port);
        }
        assert_eq!(bitmap.random_free(), Some(30002));
        bitmap.set(30002);
        assert_eq!(bitmap.random_free(), None);
    }

    #[tokio::test]
    async fn concurrent_changes_never_hand_out_a_port_twice() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::test_support::sqlite(dir.path()).await;
        // Two allocators on one store, as two servers on one datastore.
        let a = std::sync::Arc::new(PortAllocator::new(store.clone(), (30000, 30099)));
        let b = std::sync::Arc::new(PortAllocator::new(store, (30000, 30099)));
        let mut tasks = Vec::new();
        for i in 0..100 {
            let allocator = if i % 2 == 0 { a.clone() } else { b.clone() };
            tasks.push(tokio::spawn(async move {
                allocator
                    .change(false, |bitmap| {
                        let port = bitmap.random_free().ok_or_else(|| {
                            ApiError::from(capstan_api::StatusError::internal("full"))
                        })?;
                        bitmap.set(port);
                        Ok::<u16, ApiError>(port)
                    })
                    .await
                    .unwrap()
            }));
        }
        let mut ports = BTreeSet::new();
        for task in tasks {
            assert!(
                ports.insert(task.await.unwrap()),
                "a port was handed out twice"
            );
        }
        assert_eq!(ports.len(), 100);
        let (stored, _) = a.read().await.unwrap();
        assert_eq!(stored.held(), &ports);
        a.release(&[30000, 30001]).await;
        let (stored, _) = b.read().await.unwrap();
        assert_eq!(stored.held().len(), 98);
        // A change that fails writes nothing.
        let failed = b
            .change(false, |bitmap| {
                bitmap.set(30000);
                Err::<(), ApiError>(capstan_api::StatusError::internal("no").into())
            })
            .await;
        assert!(failed.is_err());
        assert!(!a.read().await.unwrap().0.has(30000));
    }
}
