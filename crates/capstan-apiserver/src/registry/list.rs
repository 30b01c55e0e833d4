//! Lists: selectors, pages (`limit` and `continue`), and the `resourceVersion` /
//! `resourceVersionMatch` semantics upstream defines for reads.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use capstan_api::StatusError;
use capstan_api::field::{FieldError, Path};
use capstan_store::{Revision, StoreError};

use std::sync::Arc;

use super::cache::{Attrs, Cached};
use super::{Registry, parse_resource_version};
use crate::registry::object::{labels, meta_str};
use crate::registry::selectors::Selectors;
use crate::status::ApiError;

/// The query of a list.
#[derive(Clone, Debug, Default)]
pub(crate) struct ListOptions {
    /// Label and field selectors.
    pub selectors: Selectors,
    /// The page size; `None` for everything.
    pub limit: Option<usize>,
    /// The token of the previous page.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`: `NotOlderThan` or `Exact`.
    pub resource_version_match: Option<String>,
}

/// One page of a list.
#[derive(Debug)]
pub(crate) struct ListResult {
    /// The objects, in key order.
    pub items: Vec<Arc<Cached>>,
    /// The revision the list was read at.
    pub resource_version: Revision,
    /// The token of the next page, if there may be more.
    pub continue_token: Option<String>,
    /// How many objects remain after this page, when known.
    pub remaining_item_count: Option<i64>,
}

impl ListResult {
    /// A fingerprint of the items (their JSON, versions included): equal fingerprints mean, with
    /// overwhelming likelihood, the same objects at the same versions.
    pub(crate) fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        for item in &self.items {
            item.json.hash(&mut hasher);
        }
        hasher.finish()
    }
}

/// Where a read is served from, decided from `resourceVersion` and `resourceVersionMatch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadAt {
    /// The latest state (a consistent read, or "any" for `resourceVersion=0`).
    Latest,
    /// The latest state, which must not be older than this revision.
    NotOlderThan(Revision),
    /// Exactly this revision.
    Exact(Revision),
}

fn list_options_invalid(field: &str, value: &str, detail: &str) -> ApiError {
    let error = if value.is_empty() {
        FieldError::forbidden(&Path::new(field), detail)
    } else {
        FieldError::invalid(&Path::new(field), value, detail)
    };
    StatusError::invalid("meta.k8s.io", "ListOptions", "", &[error]).into()
}

/// Reads `resourceVersion` and `resourceVersionMatch` as upstream validates them.
pub(crate) fn read_at(
    resource_version: Option<&str>,
    version_match: Option<&str>,
) -> Result<ReadAt, ApiError> {
    let rv = resource_version.filter(|v| !v.is_empty());
    let version_match = version_match.filter(|v| !v.is_empty());
    let parsed = match rv {
        None => None,
        Some(text) => Some(parse_resource_version(text).map_err(|()| {
            ApiError::from(StatusError::bad_request(&format!(
                "invalid resource version: {text}"
            )))
        })?),
    };
    match (parsed, version_match) {
        (None, None) | (Some(0), None) => Ok(ReadAt::Latest),
        (Some(n), None) => Ok(ReadAt::NotOlderThan(n)),
        (None, Some(_)) => Err(list_options_invalid(
            "resourceVersionMatch",
            "",
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        )),
        (Some(n), Some("NotOlderThan")) => Ok(if n == 0 {
            ReadAt::Latest
        } else {
            ReadAt::NotOlderThan(n)
        }),
        (Some(0), Some("Exact")) => Err(list_options_invalid(
            "resourceVersionMatch",
            "",
            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        )),
        (Some(n), Some("Exact")) => Ok(ReadAt::Exact(n)),
        (Some(_), Some(other)) => Err(StatusError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            &[FieldError::not_supported(
                &Path::new("resourceVersionMatch"),
                other,
                &["Exact", "NotOlderThan", ""],
            )],
        )
        .into()),
    }
}

/// The body of a continue token: the revision of the first page and the key to start from,
/// relative to the listed prefix (upstream's format, so tokens look the same).
#[derive(serde::Serialize, serde::Deserialize)]
struct Token {
    v: String,
    rv: Revision,
    start: String,
}

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

fn encode_token(rv: Revision, start_relative: &str) -> String {
    let token = Token {
        v: TOKEN_VERSION.into(),
        rv,
        start: start_relative.to_owned(),
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default())
}

fn decode_token(token: &str) -> Result<(Revision, String), String> {
    let bytes = URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|e| format!("continue key is not valid: {e}"))?;
    let token: Token =
        serde_json::from_slice(&bytes).map_err(|e| format!("continue key is not valid: {e}"))?;
    if token.v != TOKEN_VERSION {
        return Err(format!(
            "continue key is not valid: server does not recognize this encoded key version {:?}",
            token.v
        ));
    }
    if token.rv < 1 || token.start.is_empty() {
        return Err("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into());
    }
    if token.start.starts_with('/') || token.start.split('/').any(|p| p == "..") {
        return Err(
            "continue key is not valid: the start key may not escape the listed prefix".into(),
        );
    }
    Ok((token.rv, token.start))
}

/// Upstream's message for a continue token whose revision has been compacted.
const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// The most keys read from the store per round while filling a filtered page.
const MAX_PAGE_READ: usize = 10_000;

impl Registry {
    /// Whether a cached object passes the selectors; its labels and fields are worked out once
    /// and kept with it.
    pub(crate) fn matches_cached(&self, selectors: &Selectors, cached: &Cached) -> bool {
        if selectors.is_empty() {
            return true;
        }
        let attrs = cached.attrs(|object| {
            let mut fields = vec![
                ("metadata.name", meta_str(object, "name").to_owned()),
                (
                    "metadata.namespace",
                    meta_str(object, "namespace").to_owned(),
                ),
            ];
            fields.extend(self.strategy().selectable_fields(object));
            fields.shrink_to_fit();
            Attrs {
                labels: labels(object),
                fields,
            }
        });
        let strategy = self.strategy();
        selectors.matches(&attrs.labels, |field| {
            let field = strategy.hub_field_label(field);
            attrs
                .fields
                .iter()
                .find(|(name, _)| *name == field)
                .map(|(_, value)| value.clone())
        })
    }

    /// Checks that the field selector uses only fields this resource supports.
    pub(crate) fn check_selectors(&self, selectors: &Selectors) -> Result<(), ApiError> {
        selectors.check_fields(self.strategy().selectable_field_names())
    }

    /// Where a list reads, from `resourceVersion` and `resourceVersionMatch`. With a page size
    /// and no match rule, a revision other than 0 means exactly that revision, as upstream
    /// reads it.
    fn list_read_at(&self, options: &ListOptions) -> Result<ReadAt, ApiError> {
        let at = read_at(
            options.resource_version.as_deref(),
            options.resource_version_match.as_deref(),
        )?;
        let no_match = options
            .resource_version_match
            .as_deref()
            .is_none_or(str::is_empty);
        Ok(match at {
            ReadAt::NotOlderThan(n) if no_match && options.limit.is_some() => ReadAt::Exact(n),
            other => other,
        })
    }

    /// A page as served (its objects are the cache's, in the stored version).
    async fn served_page(&self, mut page: ListResult) -> Result<ListResult, ApiError> {
        page.items = self.views(page.items).await?;
        Ok(page)
    }

    /// A page of `objects` (the objects under `prefix` at `revision` from where the page
    /// starts, in key order), in the stored version.
    fn page(
        &self,
        objects: Vec<Arc<Cached>>,
        revision: Revision,
        prefix: &str,
        options: &ListOptions,
    ) -> ListResult {
        let limit = options.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let total = objects.len();
        let mut items = Vec::new();
        let mut continue_token = None;
        let mut remaining_item_count = None;
        let mut matching = objects
            .into_iter()
            .enumerate()
            .filter(|(_, o)| self.matches_cached(&options.selectors, o));
        for (i, object) in matching.by_ref() {
            items.push(object);
            if items.len() < limit {
                continue;
            }
            if i + 1 < total {
                let last = items[items.len() - 1].object();
                let namespace = Some(meta_str(&last, "namespace")).filter(|n| !n.is_empty());
                let key = self.key(namespace, meta_str(&last, "name"));
                let start = format!("{}\0", key.strip_prefix(prefix).unwrap_or(&key));
                // Upstream counts what remains only when nothing is filtered out.
                if options.selectors.is_empty() {
                    remaining_item_count = Some(i64::try_from(total - i - 1).unwrap_or(i64::MAX));
                    continue_token = Some(encode_token(revision, &start));
                } else if matching.next().is_some() {
                    continue_token = Some(encode_token(revision, &start));
                }
            }
            break;
        }
        ListResult {
            items,
            resource_version: revision,
            continue_token,
            remaining_item_count,
        }
    }

    /// Lists objects in `namespace` (all namespaces for `None`).
    pub(crate) async fn list(
        &self,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<ListResult, ApiError> {
        self.check_selectors(&options.selectors)?;
        let prefix = self.resource.storage_namespace_prefix(namespace);
        // A selector the cache's index answers (`spec.nodeName=<node>` on pods) reads only the
        // objects it holds under that value.
        let narrow = self
            .cache
            .as_ref()
            .and_then(|c| c.narrowing(&options.selectors));
        let first_page = options.continue_token.as_deref().is_none_or(str::is_empty);
        // resourceVersion=0 means "any version": the watch cache answers, whole (as upstream's
        // cache, which treats the limit as a hint).
        let any_version = options.resource_version.as_deref() == Some("0")
            && first_page
            && options
                .resource_version_match
                .as_deref()
                .is_none_or(|m| m.is_empty() || m == "NotOlderThan");
        if any_version
            && let Some((objects, revision)) = self
                .cache
                .as_ref()
                .and_then(|c| c.snapshot(&prefix, narrow))
        {
            let items = objects
                .into_iter()
                .filter(|o| self.matches_cached(&options.selectors, o))
                .collect();
            let items = self.views(items).await?;
            return Ok(ListResult {
                items,
                resource_version: revision,
                continue_token: None,
                remaining_item_count: None,
            });
        }
        // A first page at the latest state, or at one not older than a revision, comes from the
        // watch cache once it has caught up (upstream's consistent list from the cache); later
        // pages read the store at the first page's revision.
        if first_page && let Some(cache) = self.cache.as_deref() {
            let fresh = match self.list_read_at(options)? {
                ReadAt::Latest => self.fresh_cache().await.is_some(),
                ReadAt::NotOlderThan(n) => cache.wait_for(n, super::FRESH_WAIT).await,
                ReadAt::Exact(_) => false,
            };
            if fresh && let Some((objects, revision)) = cache.snapshot(&prefix, narrow) {
                return self
                    .served_page(self.page(objects, revision, &prefix, options))
                    .await;
            }
        }
        let (mut revision, mut start) = match &options.continue_token {
            Some(token) if !token.is_empty() => {
                if options
                    .resource_version
                    .as_deref()
                    .is_some_and(|v| !v.is_empty() && v != "0")
                {
                    return Err(StatusError::bad_request(
                        "specifying resource version is not allowed when using continue",
                    )
                    .into());
                }
                let (rv, start) = decode_token(token)
                    .map_err(|m| ApiError::from(StatusError::bad_request(&m)))?;
                let start = format!("{prefix}{start}");
                // Nothing of the resource changed since the first page: the cache holds that
                // state still.
                if let Some(objects) = self
                    .cache
                    .as_deref()
                    .and_then(|c| c.unchanged_since(rv, &prefix, &start, narrow))
                {
                    return self
                        .served_page(self.page(objects, rv, &prefix, options))
                        .await;
                }
                (Some(rv), Some(start))
            }
            _ => {
                let revision = match self.list_read_at(options)? {
                    ReadAt::Latest => None,
                    ReadAt::Exact(n) => Some(n),
                    ReadAt::NotOlderThan(n) => {
                        let current = self
                            .store()
                            .current_revision()
                            .await
                            .map_err(|e| self.store_error("", e))?;
                        if n > current {
                            return Err(
                                StatusError::too_large_resource_version(n, current, 1).into()
                            );
                        }
                        None
                    }
                };
                (revision, None)
            }
        };
        let limit = options.limit.filter(|l| *l > 0);
        let mut items = Vec::new();
        let mut continue_from: Option<String> = None;
        let mut remaining_item_count = None;
        loop {
            let want = limit.map_or(MAX_PAGE_READ, |l| (l - items.len()).clamp(1, MAX_PAGE_READ));
            let read = if options.selectors.is_empty() {
                want
            } else {
                (want * 2).min(MAX_PAGE_READ)
            };
            let page = self
                .store()
                .list(&capstan_store::ListOptions {
                    prefix: prefix.clone(),
                    start: start.clone(),
                    revision,
                    limit: Some(read),
                })
                .await
                .map_err(|e| match (e, &options.continue_token) {
                    (StoreError::Compacted { .. }, Some(_)) => {
                        StatusError::resource_expired(CONTINUE_EXPIRED).into()
                    }
                    (e, _) => self.store_error("", e),
                })?;
            revision = Some(page.revision);
            let mut stopped_at = None;
            for (i, kv) in page.kvs.iter().enumerate() {
                let cached = if self.converts_by_webhook() {
                    // Converted together once the page is complete.
                    self.stored_cached(kv)?
                } else {
                    self.cached_from_kv(kv).await?
                };
                if self.matches_cached(&options.selectors, &cached) {
                    items.push(cached);
                    if limit.is_some_and(|l| items.len() >= l) {
                        stopped_at = Some(i);
                        break;
                    }
                }
            }
            match stopped_at {
                Some(i) => {
                    let last = &page.kvs[i].key;
                    if i + 1 < page.kvs.len() || page.more {
                        continue_from = Some(format!("{last}\0"));
                        // Upstream counts what remains only when nothing is filtered out.
                        if options.selectors.is_empty() {
                            let remaining = page.count.saturating_sub(i as u64 + 1);
                            remaining_item_count =
                                Some(i64::try_from(remaining).unwrap_or(i64::MAX));
                        }
                    }
                    break;
                }
                None if page.more => start = page.continue_key(),
                None => break,
            }
        }
        let revision = revision.unwrap_or_default();
        let continue_token = continue_from
            .map(|key| encode_token(revision, key.strip_prefix(&prefix).unwrap_or(&key)));
        if self.converts_by_webhook() {
            items = self.views(items).await?;
        }
        Ok(ListResult {
            items,
            resource_version: revision,
            continue_token,
            remaining_item_count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_reject_tampering() {
        let token = encode_token(42, "default/web\0");
        assert_eq!(
            decode_token(&token).unwrap(),
            (42, "default/web\0".to_owned())
        );
        assert!(decode_token("!!").is_err());
        let escape =
            URL_SAFE_NO_PAD.encode(br#"{"v":"meta.k8s.io/v1","rv":3,"start":"../secrets/x"}"#);
        assert!(decode_token(&escape).unwrap_err().contains("escape"));
        let version = URL_SAFE_NO_PAD.encode(br#"{"v":"x","rv":3,"start":"a"}"#);
        assert!(decode_token(&version).is_err());
    }

    #[test]
    fn resource_version_semantics() {
        assert_eq!(read_at(None, None).unwrap(), ReadAt::Latest);
        assert_eq!(read_at(Some("0"), None).unwrap(), ReadAt::Latest);
        assert_eq!(read_at(Some("7"), None).unwrap(), ReadAt::NotOlderThan(7));
        assert_eq!(read_at(Some("7"), Some("Exact")).unwrap(), ReadAt::Exact(7));
        assert_eq!(
            read_at(Some("7"), Some("NotOlderThan")).unwrap(),
            ReadAt::NotOlderThan(7)
        );
        assert!(read_at(None, Some("Exact")).is_err());
        assert!(read_at(Some("0"), Some("Exact")).is_err());
        assert!(read_at(Some("x"), None).is_err());
        assert!(read_at(Some("1"), Some("Sometimes")).is_err());
    }
}
