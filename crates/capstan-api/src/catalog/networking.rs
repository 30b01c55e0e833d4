//! The `networking.k8s.io/v1` kinds. IPAddresses and ServiceCIDRs are the cluster IP
//! allocator's (upstream's MultiCIDRServiceAllocator, GA in 1.33): the API server's service
//! registry creates an IPAddress per cluster IP (`capstan-apiserver`'s `registry/services.rs`).

use k8s_openapi::api::networking::v1::{
    IPAddress, Ingress, IngressClass, NetworkPolicy, ServiceCIDR,
};

use super::{Resource, of, printer, status, typed};
use crate::defaults as d;
use crate::printers::other as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[
    Resource {
        printer: printer(p::INGRESS_CLASS_COLUMNS, p::ingress_class),
        strategy: || {
            typed::<IngressClass>(Hooks {
                default: d::misc::default_ingress_class,
                validate: v::networking::validate_ingress_class,
                validate_update: v::networking::validate_ingress_class_update,
                generation: true,
                ..Hooks::plain()
            })
        },
        ..of::<IngressClass>("ingressclass")
    },
    Resource {
        short_names: &["ing"],
        subresources: &[status("Ingress")],
        storage_prefix: "ingress",
        printer: printer(p::INGRESS_COLUMNS, p::ingress),
        strategy: || {
            typed::<Ingress>(Hooks {
                validate: v::networking::validate_ingress,
                validate_update: v::networking::validate_ingress_update,
                validate_status_update: v::networking::validate_ingress_status_update,
                ..Hooks::workload()
            })
        },
        ..of::<Ingress>("ingress")
    },
    Resource {
        printer: printer(p::IP_ADDRESS_COLUMNS, p::ip_address),
        strategy: || {
            typed::<IPAddress>(Hooks {
                validate: v::networking::validate_ip_address,
                validate_update: v::networking::validate_ip_address_update,
                ..Hooks::plain()
            })
        },
        ..of::<IPAddress>("ipaddress")
    },
    Resource {
        short_names: &["netpol"],
        printer: printer(p::NETWORK_POLICY_COLUMNS, p::network_policy),
        strategy: || {
            typed::<NetworkPolicy>(Hooks {
                default: d::misc::default_network_policy,
                validate: v::networking::validate_network_policy,
                validate_update: v::networking::validate_network_policy_update,
                generation: true,
                ..Hooks::plain()
            })
        },
        ..of::<NetworkPolicy>("networkpolicy")
    },
    Resource {
        subresources: &[status("ServiceCIDR")],
        printer: printer(p::SERVICE_CIDR_COLUMNS, p::service_cidr),
        strategy: || {
            typed::<ServiceCIDR>(Hooks {
                validate: v::networking::validate_service_cidr,
                validate_update: v::networking::validate_service_cidr_update,
                ..Hooks::with_status()
            })
        },
        ..of::<ServiceCIDR>("servicecidr")
    },
];
