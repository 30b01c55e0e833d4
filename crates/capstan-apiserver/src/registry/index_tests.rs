//! The watch cache's index (pods by `spec.nodeName`) against the walk it spares: two registries
//! over one store, one whose cache keeps the index and one whose cache does not, must answer
//! every list and watch alike (items, resourceVersions, continue tokens, events).

use std::sync::Arc;
use std::time::Duration;

use capstan_store::Store;
use futures::StreamExt;
use serde_json::{Value, json};

use super::Registry;
use super::cache::Caches;
use super::list::{ListOptions, ListResult};
use super::selectors::Selectors;
use super::watch::{WatchEventOut, WatchOptions};

const PODS: &str = "/registry/pods/";

/// A small deterministic generator (xorshift), so a failure can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The store, and a pod registry over it whose cache is indexed or not.
struct Twins {
    store: Store,
    indexed: Arc<Registry>,
    walked: Arc<Registry>,
    _caches: (Arc<Caches>, Arc<Caches>),
    _dir: tempfile::TempDir,
}

async fn twins() -> Twins {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::test_support::sqlite(dir.path()).await;
    let resource = capstan_api::catalog::lookup("", "v1", "pods").unwrap();
    let registry = |indexes: bool| {
        let caches = Caches::start_with(store.clone(), [resource], indexes);
        let registry = Registry::new(resource, (resource.strategy)(), store.clone())
            .with_cache(caches.cache(PODS));
        (Arc::new(registry), caches)
    };
    let (indexed, with) = registry(true);
    let (walked, without) = registry(false);
    Twins {
        store,
        indexed,
        walked,
        _caches: (with, without),
        _dir: dir,
    }
}

fn pod(namespace: &str, name: &str, node: &str, phase: &str, app: &str) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    if !node.is_empty() {
        spec["nodeName"] = node.into();
    }
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("{namespace}-{name}"),
                     "labels": {"app": app}},
        "spec": spec,
        "status": {"phase": phase},
    })
}

async fn put(store: &Store, object: &Value) -> i64 {
    let key = format!(
        "{PODS}{}/{}",
        object["metadata"]["namespace"].as_str().unwrap(),
        object["metadata"]["name"].as_str().unwrap()
    );
    let value = capstan_api::gojson::to_vec(object);
    let current = store.get(&key, None).await.unwrap().kv;
    match current {
        Some(kv) => {
            store
                .update(&key, value, Some(kv.mod_revision))
                .await
                .unwrap()
                .mod_revision
        }
        None => store.create(&key, value).await.unwrap().mod_revision,
    }
}

/// Every page of a list, followed with its continue tokens.
async fn pages(
    registry: &Registry,
    namespace: Option<&str>,
    field: &str,
    label: Option<&str>,
    limit: Option<usize>,
    resource_version: Option<&str>,
) -> Vec<ListResult> {
    let mut options = ListOptions {
        selectors: Selectors::parse(label, Some(field)).unwrap(),
        limit,
        resource_version: resource_version.map(str::to_owned),
        ..ListOptions::default()
    };
    let mut pages = Vec::new();
    loop {
        let page = registry.list(namespace, &options).await.unwrap();
        let next = page.continue_token.clone();
        pages.push(page);
        match next {
            Some(token) if pages.len() < 1000 => {
                options.continue_token = Some(token);
                options.resource_version = None;
            }
            _ => return pages,
        }
    }
}

/// A page as a client sees it: the items' JSON, resourceVersion, continue token, remaining
/// count.
type Page = (Vec<String>, i64, Option<String>, Option<i64>);

fn describe(pages: &[ListResult]) -> Vec<Page> {
    pages
        .iter()
        .map(|page| {
            let items = page
                .items
                .iter()
                .map(|o| String::from_utf8(o.json.to_vec()).unwrap())
                .collect();
            (
                items,
                page.resource_version,
                page.continue_token.clone(),
                page.remaining_item_count,
            )
        })
        .collect()
}

/// Random pods over a few namespaces and nodes (and unscheduled ones), listed through every
/// kind of query: the indexed registry answers exactly as the walking one, and the node
/// selections find exactly the pods bound to the node.
#[tokio::test]
async fn indexed_lists_answer_as_the_walk_does() {
    let twins = twins().await;
    let namespaces = ["a", "b", "c"];
    let nodes = ["n1", "n2", "n3", "n4", ""];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut pods = Vec::new();
    for i in 0..240 {
        let pod = pod(
            namespaces[rng.below(namespaces.len())],
            &format!("p{:03}", rng.below(1000)),
            nodes[rng.below(nodes.len())],
            ["Running", "Pending", "Failed"][rng.below(3)],
            ["web", "db"][rng.below(2)],
        );
        put(&twins.store, &pod).await;
        // Some pods move to another node or go away again.
        if i % 7 == 0 {
            let mut moved = pod.clone();
            moved["spec"]["nodeName"] = nodes[rng.below(4)].into();
            put(&twins.store, &moved).await;
        }
        if i % 11 == 0 {
            let key = format!(
                "{PODS}{}/{}",
                pod["metadata"]["namespace"].as_str().unwrap(),
                pod["metadata"]["name"].as_str().unwrap()
            );
            twins.store.delete(&key, None).await.unwrap();
        }
        pods.push(pod);
    }
    let queries = [
        ("spec.nodeName=n1", None),
        ("spec.nodeName=n2", Some("app=web")),
        ("spec.nodeName==n3,status.phase!=Failed", None),
        ("status.phase!=Failed,spec.nodeName=n4", Some("app in (db)")),
        ("spec.nodeName=n1,spec.nodeName=n2", None),
        ("spec.nodeName=nowhere", None),
        // Not narrowed: the index holds no unscheduled pods.
        ("spec.nodeName=", None),
        ("spec.nodeName!=n1", None),
    ];
    let mut narrowed_items = 0;
    for (field, label) in queries {
        for namespace in [None, Some("a"), Some("c")] {
            for limit in [None, Some(1), Some(7)] {
                for rv in [None, Some("0")] {
                    let indexed = pages(&twins.indexed, namespace, field, label, limit, rv).await;
                    let walked = pages(&twins.walked, namespace, field, label, limit, rv).await;
                    assert_eq!(
                        describe(&indexed),
                        describe(&walked),
                        "{field} {label:?} in {namespace:?}, limit {limit:?}, rv {rv:?}"
                    );
                    if field == "spec.nodeName=n1" {
                        narrowed_items += indexed.iter().map(|p| p.items.len()).sum::<usize>();
                    }
                }
            }
        }
    }
    assert!(narrowed_items > 0, "the node selections found pods");
    // What a node's list finds is exactly the pods bound to it.
    let listed = pages(&twins.indexed, None, "spec.nodeName=n2", None, None, None).await;
    let (all, _) = twins
        .walked
        .cache
        .as_ref()
        .unwrap()
        .snapshot(PODS, None)
        .unwrap();
    let bound: Vec<_> = all
        .iter()
        .filter(|o| o.object()["spec"]["nodeName"] == "n2")
        .map(|o| o.json.clone())
        .collect();
    let found: Vec<_> = listed[0].items.iter().map(|o| o.json.clone()).collect();
    assert!(!bound.is_empty());
    assert_eq!(found, bound);
}

/// A page after the first, once pods have changed, reads the store; before, the cache: both
/// agree between the twins, through binds and deletes between the pages.
#[tokio::test]
async fn continued_lists_agree_across_changes() {
    let twins = twins().await;
    for i in 0..30 {
        let node = ["n1", "n2"][i % 2];
        put(
            &twins.store,
            &pod("a", &format!("p{i:02}"), node, "Running", "web"),
        )
        .await;
    }
    for registry in [&twins.indexed, &twins.walked] {
        let _ = pages(registry, None, "spec.nodeName=n1", None, None, None).await;
    }
    let first = |registry: Arc<Registry>| async move {
        let options = ListOptions {
            selectors: Selectors::parse(None, Some("spec.nodeName=n1")).unwrap(),
            limit: Some(4),
            ..ListOptions::default()
        };
        registry.list(Some("a"), &options).await.unwrap()
    };
    let (a, b) = (
        first(twins.indexed.clone()).await,
        first(twins.walked.clone()).await,
    );
    assert_eq!(describe(&[a]), describe(&[b]));
    let token = first(twins.indexed.clone()).await.continue_token.unwrap();
    let rest = |registry: Arc<Registry>, token: String| async move {
        let options = ListOptions {
            selectors: Selectors::parse(None, Some("spec.nodeName=n1")).unwrap(),
            limit: Some(4),
            continue_token: Some(token),
            ..ListOptions::default()
        };
        registry.list(Some("a"), &options).await.unwrap()
    };
    // Unchanged: the second page comes from the cache.
    let (a, b) = (
        rest(twins.indexed.clone(), token.clone()).await,
        rest(twins.walked.clone(), token.clone()).await,
    );
    assert_eq!(describe(&[a]), describe(&[b]));
    // A bind and a delete later, the same token reads the store at the first page's revision.
    put(&twins.store, &pod("a", "p01", "n1", "Running", "web")).await;
    twins
        .store
        .delete("/registry/pods/a/p02", None)
        .await
        .unwrap();
    let (a, b) = (
        rest(twins.indexed.clone(), token.clone()).await,
        rest(twins.walked.clone(), token).await,
    );
    assert_eq!(describe(&[a]), describe(&[b]));
}

/// The events a watch sends until one for the pod named `end`.
async fn events_until_end(
    mut stream: impl futures::Stream<Item = WatchEventOut> + Unpin,
) -> Vec<(String, String)> {
    let mut events = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("an event within 10 s")
            .expect("the watch goes on");
        let object = event.object.object();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        events.push((
            event.kind.to_owned(),
            String::from_utf8(event.object.json.to_vec()).unwrap(),
        ));
        if name == "end" {
            return events;
        }
    }
}

/// A node's watchers (from now, from a revision, and with the current state first) see the
/// same events with and without the index: a pod bound to the node is ADDED, changed on it
/// MODIFIED, moved away or deleted DELETED; other nodes' pods are not seen.
#[tokio::test]
async fn indexed_watches_see_what_the_walk_sees() {
    let twins = twins().await;
    put(&twins.store, &pod("a", "before", "n1", "Running", "web")).await;
    put(&twins.store, &pod("b", "other", "n2", "Running", "web")).await;
    let from = put(&twins.store, &pod("a", "waiting", "", "Pending", "web")).await;
    // Caught up with the store before the watches start from `from`.
    for registry in [&twins.indexed, &twins.walked] {
        let _ = pages(registry, None, "spec.nodeName=n1", None, None, None).await;
    }
    let watch = |registry: Arc<Registry>, namespace: Option<&'static str>, rv: Option<i64>| async move {
        let options = WatchOptions {
            selectors: Selectors::parse(None, Some("spec.nodeName=n1")).unwrap(),
            resource_version: rv.map(|rv| rv.to_string()),
            timeout: Duration::from_secs(60),
            ..WatchOptions::default()
        };
        Box::pin(registry.watch(namespace, options).await.unwrap())
    };
    let mut streams = Vec::new();
    for registry in [&twins.indexed, &twins.walked] {
        streams.push((
            watch(registry.clone(), None, None).await,
            watch(registry.clone(), Some("a"), Some(from)).await,
            watch(registry.clone(), None, Some(from - 1)).await,
        ));
    }
    // Give the watches a moment to subscribe, as a client would have.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let store = &twins.store;
    put(store, &pod("a", "waiting", "n1", "Pending", "web")).await; // bound: ADDED
    put(store, &pod("a", "waiting", "n1", "Running", "web")).await; // MODIFIED
    put(store, &pod("b", "other", "n2", "Failed", "web")).await; // not seen
    put(store, &pod("a", "waiting", "n3", "Running", "web")).await; // moved away: DELETED
    put(store, &pod("b", "new", "n1", "Running", "db")).await; // ADDED (other namespace)
    store.delete("/registry/pods/b/new", None).await.unwrap(); // DELETED
    store.delete("/registry/pods/a/before", None).await.unwrap(); // DELETED
    put(store, &pod("a", "end", "n1", "Running", "web")).await;
    let mut seen = Vec::new();
    for (now, namespaced, from_before) in streams {
        seen.push((
            events_until_end(now).await,
            events_until_end(namespaced).await,
            events_until_end(from_before).await,
        ));
    }
    assert_eq!(seen[0], seen[1], "indexed and walked watches agree");
    let kinds = |events: &[(String, String)]| -> Vec<(String, String)> {
        events
            .iter()
            .map(|(kind, json)| {
                let object: Value = serde_json::from_str(json).unwrap();
                (
                    kind.clone(),
                    object["metadata"]["name"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(k, n)| ((*k).to_owned(), (*n).to_owned()))
            .collect()
    };
    let changes = [
        ("ADDED", "waiting"),
        ("MODIFIED", "waiting"),
        ("DELETED", "waiting"),
        ("ADDED", "new"),
        ("DELETED", "new"),
        ("DELETED", "before"),
        ("ADDED", "end"),
    ];
    let mut with_state = vec![("ADDED", "before")];
    with_state.extend(changes);
    assert_eq!(kinds(&seen[0].0), pairs(&with_state));
    let in_a: Vec<_> = changes
        .iter()
        .copied()
        .filter(|(_, name)| *name != "new")
        .collect();
    assert_eq!(kinds(&seen[0].1), pairs(&in_a));
    // From before the unscheduled pod was written: its create is no event for the node.
    assert_eq!(kinds(&seen[0].2), pairs(&changes));
}

/// A node's watcher is fed only its node's events, yet its bookmarks move with the resource:
/// once it has taken what was sent to it, a bookmark carries the last change of any pod.
#[tokio::test]
async fn narrowed_feeds_carry_one_node_and_bookmarks_keep_up() {
    let twins = twins().await;
    let cache = twins.indexed.cache.clone().unwrap();
    // The cache has applied a revision once `wait_for` says so (a list is no such sync point:
    // one the cache cannot answer in time is read from the store).
    let applied = |revision| {
        let cache = cache.clone();
        async move { assert!(cache.wait_for(revision, Duration::from_secs(30)).await) }
    };
    let start = put(&twins.store, &pod("a", "x", "n1", "Running", "web")).await;
    applied(start).await;
    let super::cache::Subscription::Events { backlog, mut feed } =
        cache.subscribe(start, Some("n1"))
    else {
        panic!("the cache serves the watch");
    };
    assert!(backlog.is_empty());
    let other = put(&twins.store, &pod("a", "y", "n2", "Running", "web")).await;
    applied(other).await;
    assert_eq!(cache.bookmark_revision(&feed, start), other);
    let mine = put(&twins.store, &pod("a", "x", "n1", "Failed", "web")).await;
    applied(mine).await;
    // Its own event not yet taken: the bookmark stays where the watcher is.
    assert_eq!(cache.bookmark_revision(&feed, other), other);
    let event = feed.recv().await.unwrap();
    assert_eq!(
        (event.key.as_str(), event.revision),
        ("/registry/pods/a/x", mine)
    );
    assert_eq!(cache.bookmark_revision(&feed, mine), mine);
    // The other node's change never reached this feed.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), feed.recv())
            .await
            .is_err()
    );
}
