//! The service account controller (upstream's `serviceaccounts-controller`): every active
//! namespace has a `default` ServiceAccount; one deleted is made again.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::runtime::{self, Change, Error, Queue, Setup, Task};

/// The service accounts every namespace gets.
const NAMES: [&str; 1] = ["default"];

/// The controller's shared state.
pub(crate) struct Context {
    client: Client,
    accounts: Store<ServiceAccount>,
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let namespaces = setup.watch::<Namespace>();
    let accounts = setup.watch::<ServiceAccount>();
    let (queue, rx) = Queue::<Namespace>::new();
    queue.follow_applied(&namespaces);
    accounts.on_change(move |change| {
        let account = change.object();
        if let (Change::Deleted(_), Some(namespace)) =
            (change, account.metadata.namespace.as_deref())
            && NAMES.contains(&account.metadata.name.as_deref().unwrap_or_default())
        {
            queue.add_name(None, namespace);
        }
    });
    let ctx = Arc::new(Context {
        client: setup.client(),
        accounts: accounts.store(),
    });
    setup.run("serviceaccount", &namespaces, rx, ctx, reconcile)
}

/// Creates the missing service accounts of an active namespace.
pub(crate) async fn reconcile(
    namespace: Arc<Namespace>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if !crate::namespace::is_active(&namespace) {
        return Ok(Action::await_change());
    }
    let name = namespace.metadata.name.clone().unwrap_or_default();
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &name);
    for account in NAMES {
        if ctx
            .accounts
            .get(&ObjectRef::new(account).within(&name))
            .is_some()
        {
            continue;
        }
        let object = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(account.to_owned()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            // Already there, or the namespace began terminating meanwhile.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 403 => {}
            Err(error) if runtime::is_not_found(&error) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(Action::await_change())
}
