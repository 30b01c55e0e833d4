//! Values transformed on their way to and from the backend, as upstream's storage transformers
//! do for encryption at rest: a [`Transformer`] seals each value written under a key and opens
//! each value read (gets, lists, watch events with their previous values, conflicts, deletes),
//! so everything above the [`crate::Store`] sees plain values and everything below, the
//! database included, only sealed ones. Revisions, keys and TTLs pass through untouched.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt as _;

use crate::{
    Backend, DeleteResponse, GetResponse, KeyValue, ListOptions, ListResponse, Result, Revision,
    StoreError, WatchStream,
};

/// Seals and opens the values stored under keys.
pub trait Transformer: Send + Sync + 'static {
    /// The bytes to store for `value` written under `key`.
    fn seal(&self, key: &str, value: &[u8]) -> std::result::Result<Vec<u8>, String>;
    /// The value that `stored`, read from under `key`, holds.
    fn open(&self, key: &str, stored: &[u8]) -> std::result::Result<Vec<u8>, String>;
    /// Whether `stored` would be sealed otherwise if written again now (an older key or
    /// provider), so that writing an unchanged object must still rewrite it.
    fn stale(&self, key: &str, stored: &[u8]) -> bool;
}

/// A backend whose values go through a [`Transformer`].
pub(crate) struct Transforming {
    pub(crate) inner: Arc<dyn Backend>,
    pub(crate) transformer: Arc<dyn Transformer>,
}

fn failed(key: &str, message: String) -> StoreError {
    StoreError::Transform {
        key: key.to_owned(),
        message,
    }
}

fn open_kv(transformer: &dyn Transformer, mut kv: KeyValue) -> Result<KeyValue> {
    // A delete event's key-value has no value to open.
    if !kv.value.is_empty() {
        let opened = transformer
            .open(&kv.key, &kv.value)
            .map_err(|message| failed(&kv.key, message))?;
        kv.value = Bytes::from(opened);
    }
    Ok(kv)
}

impl Transforming {
    fn seal(&self, key: &str, value: &[u8]) -> Result<Bytes> {
        let sealed = self
            .transformer
            .seal(key, value)
            .map_err(|message| failed(key, message))?;
        let sealed = Bytes::from(sealed);
        crate::check_value(&sealed)?;
        Ok(sealed)
    }

    fn open(&self, kv: KeyValue) -> Result<KeyValue> {
        open_kv(self.transformer.as_ref(), kv)
    }

    /// Opens the state a conflict carries.
    fn open_error(&self, error: StoreError) -> StoreError {
        match error {
            StoreError::Conflict {
                key,
                expected,
                current,
            } => match self.open(*current) {
                Ok(current) => StoreError::Conflict {
                    key,
                    expected,
                    current: Box::new(current),
                },
                Err(error) => error,
            },
            other => other,
        }
    }
}

#[async_trait]
impl Backend for Transforming {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn get(&self, key: &str, revision: Option<Revision>) -> Result<GetResponse> {
        let response = self.inner.get(key, revision).await?;
        Ok(GetResponse {
            kv: response.kv.map(|kv| self.open(kv)).transpose()?,
            revision: response.revision,
        })
    }

    async fn list(&self, options: &ListOptions) -> Result<ListResponse> {
        let mut response = self.inner.list(options).await?;
        response.kvs = response
            .kvs
            .into_iter()
            .map(|kv| self.open(kv))
            .collect::<Result<_>>()?;
        Ok(response)
    }

    async fn count(&self, prefix: &str) -> Result<u64> {
        self.inner.count(prefix).await
    }

    async fn create(&self, key: &str, value: Bytes, ttl: Option<Duration>) -> Result<KeyValue> {
        let sealed = self.seal(key, &value)?;
        let mut kv = self.inner.create(key, sealed, ttl).await?;
        kv.value = value;
        Ok(kv)
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
        ttl: Option<Duration>,
    ) -> Result<KeyValue> {
        let sealed = self.seal(key, &value)?;
        let mut kv = self
            .inner
            .update(key, sealed, expected, ttl)
            .await
            .map_err(|e| self.open_error(e))?;
        kv.value = value;
        Ok(kv)
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<DeleteResponse> {
        let response = self
            .inner
            .delete(key, expected)
            .await
            .map_err(|e| self.open_error(e))?;
        Ok(DeleteResponse {
            prev: self.open(response.prev)?,
            revision: response.revision,
        })
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        let stream = self.inner.watch(prefix, after).await?;
        let transformer = self.transformer.clone();
        Ok(stream
            .map(move |event| {
                let mut event = event?;
                event.kv = open_kv(transformer.as_ref(), event.kv)?;
                event.prev = event
                    .prev
                    .map(|prev| open_kv(transformer.as_ref(), prev))
                    .transpose()?;
                Ok(event)
            })
            .boxed())
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    async fn compact_turn(
        &self,
        expected_version: i64,
        revision: Revision,
    ) -> Result<crate::CompactTurn> {
        self.inner.compact_turn(expected_version, revision).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventKind, Store};

    /// Reverses values behind a `sealed:` prefix; `old:` values are readable but stale.
    struct Reverse;

    impl Transformer for Reverse {
        fn seal(&self, _key: &str, value: &[u8]) -> std::result::Result<Vec<u8>, String> {
            let mut out = b"sealed:".to_vec();
            out.extend(value.iter().rev());
            Ok(out)
        }
        fn open(&self, _key: &str, stored: &[u8]) -> std::result::Result<Vec<u8>, String> {
            if let Some(rest) = stored.strip_prefix(b"sealed:") {
                return Ok(rest.iter().rev().copied().collect());
            }
            if let Some(rest) = stored.strip_prefix(b"old:") {
                return Ok(rest.to_vec());
            }
            Err("no matching prefix".to_owned())
        }
        fn stale(&self, _key: &str, stored: &[u8]) -> bool {
            !stored.starts_with(b"sealed:")
        }
    }

    #[tokio::test]
    async fn every_path_sees_plain_values_and_the_backend_sealed_ones() {
        let dir = tempfile::tempdir().unwrap();
        let raw = Store::sqlite(crate::sqlite::SqliteConfig::new(
            dir.path().join("db.sqlite"),
        ))
        .await
        .unwrap();
        let store = raw.clone().with_transformer(Arc::new(Reverse));
        let mut watch = store.watch("/k/", 0).await.unwrap();
        let created = store.create("/k/a", "hello").await.unwrap();
        assert_eq!(created.value, "hello");
        let stored = raw.get("/k/a", None).await.unwrap().kv.unwrap();
        assert_eq!(stored.value, "sealed:olleh");
        assert_eq!(
            store.get("/k/a", None).await.unwrap().kv.unwrap().value,
            "hello"
        );
        let listed = store.list(&ListOptions::prefix("/k/")).await.unwrap();
        assert_eq!(listed.kvs[0].value, "hello");
        // A conflict carries the current value, opened.
        let updated = store
            .update("/k/a", "world", Some(created.mod_revision))
            .await
            .unwrap();
        match store.update("/k/a", "x", Some(created.mod_revision)).await {
            Err(StoreError::Conflict { current, .. }) => assert_eq!(current.value, "world"),
            other => panic!("{other:?}"),
        }
        let deleted = store
            .delete("/k/a", Some(updated.mod_revision))
            .await
            .unwrap();
        assert_eq!(deleted.prev.value, "world");
        let mut seen = Vec::new();
        for _ in 0..3 {
            let event = watch.next().await.unwrap().unwrap();
            seen.push((
                event.kind,
                event.kv.value.clone(),
                event.prev.map(|p| p.value),
            ));
        }
        assert_eq!(
            seen,
            [
                (EventKind::Put, Bytes::from("hello"), None),
                (
                    EventKind::Put,
                    Bytes::from("world"),
                    Some(Bytes::from("hello"))
                ),
                (EventKind::Delete, Bytes::new(), Some(Bytes::from("world"))),
            ]
        );
        // Values the transformer cannot open are errors, not garbage; stale ones are told.
        raw.create("/k/plain", "text").await.unwrap();
        assert!(matches!(
            store.get("/k/plain", None).await,
            Err(StoreError::Transform { .. })
        ));
        raw.create("/k/old", "old:v").await.unwrap();
        assert_eq!(
            store.get("/k/old", None).await.unwrap().kv.unwrap().value,
            "v"
        );
        assert!(store.rewrite_needed("/k/old").await);
        store.create("/k/new", "v").await.unwrap();
        assert!(!store.rewrite_needed("/k/new").await);
        assert!(!raw.rewrite_needed("/k/old").await);
    }
}
