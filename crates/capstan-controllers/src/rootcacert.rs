//! The root CA publisher (upstream's `root-ca-cert-publisher`): every active namespace has a
//! ConfigMap `kube-root-ca.crt` whose `ca.crt` is the bundle that verifies the API server, the
//! one pods read through projected service account volumes. One deleted is made again; one
//! edited is put back.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::runtime::{self, Error, Queue, Setup, Task};

/// The ConfigMap's name.
pub const NAME: &str = "kube-root-ca.crt";
/// The key of the bundle in its data.
const KEY: &str = "ca.crt";
/// The annotation upstream sets on it, and its value (clients may compare it).
const DESCRIPTION_KEY: &str = "kubernetes.io/description";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver \
     when using internal endpoints such as the internal service IP or kubernetes.default.svc. \
     No other usage is guaranteed across distributions of Kubernetes clusters.";

/// The controller's shared state.
pub(crate) struct Context {
    client: Client,
    maps: Store<ConfigMap>,
    root_ca: String,
}

/// Registers the informer handlers and returns the controller's run future; `root_ca` is the
/// PEM bundle to publish.
pub fn start(mut setup: Setup<'_>) -> Task {
    // As upstream, the publisher needs the bundle; without one it does not start.
    let Some(root_ca) = setup.config().root_ca.clone() else {
        tracing::warn!("no root CA bundle known: root-ca-cert-publisher not started");
        return Box::pin(async {});
    };
    let namespaces = setup.watch::<Namespace>();
    let maps = setup.watch_by_fields::<ConfigMap>("metadata.name=kube-root-ca.crt");
    let (queue, rx) = Queue::<Namespace>::new();
    queue.follow_applied(&namespaces);
    maps.on_change(move |change| {
        let map = change.object();
        if map.metadata.name.as_deref() == Some(NAME)
            && let Some(namespace) = map.metadata.namespace.as_deref()
        {
            queue.add_name(None, namespace);
        }
    });
    let ctx = Arc::new(Context {
        client: setup.client(),
        maps: maps.store(),
        root_ca,
    });
    setup.run("root-ca-cert-publisher", &namespaces, rx, ctx, reconcile)
}

/// What the ConfigMap must hold, if `existing` does not already.
fn wanted(existing: Option<&ConfigMap>, root_ca: &str) -> Option<ConfigMap> {
    let data: BTreeMap<String, String> = [(KEY.to_owned(), root_ca.to_owned())].into();
    let mut map = match existing {
        None => ConfigMap {
            metadata: ObjectMeta {
                name: Some(NAME.to_owned()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        },
        Some(existing) => {
            let described = existing
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DESCRIPTION_KEY))
                .is_some_and(|d| !d.is_empty());
            if existing.data.as_ref() == Some(&data) && described {
                return None;
            }
            existing.clone()
        }
    };
    map.data = Some(data);
    map.binary_data = None;
    map.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DESCRIPTION_KEY.to_owned(), DESCRIPTION.to_owned());
    Some(map)
}

/// Creates or restores the ConfigMap of an active namespace.
pub(crate) async fn reconcile(
    namespace: Arc<Namespace>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if !crate::namespace::is_active(&namespace) {
        return Ok(Action::await_change());
    }
    let name = namespace.metadata.name.clone().unwrap_or_default();
    let existing = ctx.maps.get(&ObjectRef::new(NAME).within(&name));
    let Some(map) = wanted(existing.as_deref(), &ctx.root_ca) else {
        return Ok(Action::await_change());
    };
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &name);
    let written = match existing {
        None => api.create(&PostParams::default(), &map).await.map(drop),
        Some(_) => api
            .replace(NAME, &PostParams::default(), &map)
            .await
            .map(drop),
    };
    match written {
        Ok(()) => Ok(Action::await_change()),
        // Created meanwhile, changed meanwhile (the watch brings it back here), or the
        // namespace began terminating.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 403 => Ok(Action::await_change()),
        Err(error) if runtime::is_not_found(&error) => Ok(Action::await_change()),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    #[test]
    fn a_missing_map_is_made_with_the_bundle_and_description() {
        let map = wanted(None, CA).unwrap_or_default();
        assert_eq!(map.metadata.name.as_deref(), Some(NAME));
        assert_eq!(
            map.data.unwrap_or_default().get(KEY).map(String::as_str),
            Some(CA)
        );
        let annotations = map.metadata.annotations.unwrap_or_default();
        assert!(annotations[DESCRIPTION_KEY].starts_with("Contains a CA bundle"));
    }

    #[test]
    fn an_edited_map_is_put_back_and_a_current_one_left_alone() {
        let current = wanted(None, CA).unwrap_or_default();
        assert!(wanted(Some(&current), CA).is_none());
        let mut edited = current.clone();
        edited.metadata.resource_version = Some("7".into());
        edited.data = Some(
            [
                ("ca.crt".to_owned(), "x".to_owned()),
                ("extra".to_owned(), "y".to_owned()),
            ]
            .into(),
        );
        edited
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert("team".into(), "a".into());
        let restored = wanted(Some(&edited), CA).unwrap_or_default();
        assert_eq!(
            restored.data, current.data,
            "the data is exactly the bundle again"
        );
        assert_eq!(
            restored.metadata.resource_version.as_deref(),
            Some("7"),
            "an update of what was read"
        );
        assert_eq!(
            restored
                .metadata
                .annotations
                .unwrap_or_default()
                .get("team")
                .map(String::as_str),
            Some("a")
        );
        let mut undescribed = current.clone();
        undescribed.metadata.annotations = None;
        assert!(wanted(Some(&undescribed), CA).is_some());
    }
}
