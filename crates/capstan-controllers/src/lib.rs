//! Capstan's controller manager: upstream kube-controller-manager's controllers, each a
//! level-triggered reconciler that reads the desired and the current state from shared
//! informer caches and acts on the difference through the API (never on storage).

pub mod deployment;
pub mod runtime;
