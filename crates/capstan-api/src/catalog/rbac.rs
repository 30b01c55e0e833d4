//! The `rbac.authorization.k8s.io/v1` kinds.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};

use super::{Resource, of, printer, typed};
use crate::defaults as d;
use crate::printers::other as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[
    Resource {
        printer: printer(p::ROLE_BINDING_COLUMNS, p::role_binding),
        strategy: || {
            typed::<ClusterRoleBinding>(Hooks {
                default: d::misc::default_cluster_role_binding,
                validate: v::rbac::validate_cluster_role_binding,
                validate_update: v::rbac::validate_cluster_role_binding_update,
                ..Hooks::creatable_by_put()
            })
        },
        ..of::<ClusterRoleBinding>("clusterrolebinding")
    },
    Resource {
        strategy: || {
            typed::<ClusterRole>(Hooks {
                validate: v::rbac::validate_cluster_role,
                validate_update: v::rbac::validate_cluster_role_update,
                ..Hooks::creatable_by_put()
            })
        },
        ..of::<ClusterRole>("clusterrole")
    },
    Resource {
        printer: printer(p::ROLE_BINDING_COLUMNS, p::role_binding),
        strategy: || {
            typed::<RoleBinding>(Hooks {
                default: d::misc::default_role_binding,
                validate: v::rbac::validate_role_binding,
                validate_update: v::rbac::validate_role_binding_update,
                ..Hooks::creatable_by_put()
            })
        },
        ..of::<RoleBinding>("rolebinding")
    },
    Resource {
        strategy: || {
            typed::<Role>(Hooks {
                validate: v::rbac::validate_role,
                validate_update: v::rbac::validate_role_update,
                ..Hooks::creatable_by_put()
            })
        },
        ..of::<Role>("role")
    },
];
