//! Cluster IPs as `IPAddress` objects (upstream 1.33's allocator): each address a Service holds
//! is an IPAddress named by the address, referring to the Service, made with a create that
//! fails when the object exists. Whichever server creates it first has the address; a second
//! creator meets AlreadyExists and tries another. Nothing is read and then written, so servers
//! sharing one datastore never hand out an address twice.

use std::net::Ipv4Addr;
use std::sync::{Arc, OnceLock, Weak};

use serde_json::{Value, json};

use super::Cidr;
use crate::registry::object::meta_str;
use crate::registry::{DeleteOptions, ListOptions, Registries, Registry, WriteOptions};
use crate::status::ApiError;

/// The label naming who manages an IPAddress, and the allocator's value (upstream's
/// `ipallocator.k8s.io`).
pub(crate) const MANAGED_BY: (&str, &str) =
    ("ipaddress.kubernetes.io/managed-by", "ipallocator.k8s.io");
/// The label with an IPAddress's family.
pub(crate) const IP_FAMILY: &str = "ipaddress.kubernetes.io/ip-family";

/// How many random addresses are tried before the range is searched in order.
const RANDOM_TRIES: usize = 16;

/// Why an address could not be had.
#[derive(Debug)]
pub(crate) enum IpError {
    /// The address is outside the range.
    OutOfRange,
    /// The address is the range's network or broadcast address.
    Reserved,
    /// Another object holds it.
    Taken,
    /// Every address of the range is held.
    Full,
    /// The datastore failed.
    Api(ApiError),
}

impl From<ApiError> for IpError {
    fn from(error: ApiError) -> Self {
        IpError::Api(error)
    }
}

/// An address this allocator created, with its object's UID, so that undoing the allocation
/// deletes that object and never one another server made since.
#[derive(Clone, Debug)]
pub(crate) struct Reserved {
    pub ip: Ipv4Addr,
    uid: String,
}

/// The allocator of the cluster IPs of one range.
#[derive(Debug)]
pub(crate) struct IpAllocator {
    pub cidr: Cidr,
    registries: OnceLock<Weak<Registries>>,
}

/// The IPAddress object for `ip` held by the Service `namespace/name`.
pub(crate) fn ip_address(ip: Ipv4Addr, namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {
            "name": ip.to_string(),
            "labels": {IP_FAMILY: "IPv4", MANAGED_BY.0: MANAGED_BY.1},
        },
        "spec": {"parentRef": {"resource": "services", "namespace": namespace, "name": name}},
    })
}

/// Whether `ip` (an IPAddress) names the Service `namespace/name` as its parent.
pub(crate) fn held_by(ip: &Value, namespace: &str, name: &str) -> bool {
    let parent = &ip["spec"]["parentRef"];
    parent["group"].as_str().unwrap_or_default().is_empty()
        && parent["resource"] == "services"
        && parent["namespace"].as_str().unwrap_or_default() == namespace
        && parent["name"].as_str().unwrap_or_default() == name
}

fn is_not_found(error: &ApiError) -> bool {
    error.status().code() == 404
}

impl IpAllocator {
    pub(crate) fn new(cidr: Cidr) -> Self {
        IpAllocator {
            cidr,
            registries: OnceLock::new(),
        }
    }

    /// Binds the allocator to the registry table it writes IPAddresses through.
    pub(crate) fn bind(&self, registries: Weak<Registries>) {
        let _ = self.registries.set(registries);
    }

    /// The IPAddress registry.
    pub(crate) fn addresses(&self) -> Result<Arc<Registry>, ApiError> {
        self.registries
            .get()
            .and_then(Weak::upgrade)
            .and_then(|r| r.get("networking.k8s.io", "v1", "ipaddresses"))
            .ok_or_else(|| {
                capstan_api::StatusError::service_unavailable("the IPAddress registry is not ready")
                    .into()
            })
    }

    /// Reserves `ip` for the Service `namespace/name` (only checks, on a dry run).
    pub(crate) async fn allocate(
        &self,
        ip: Ipv4Addr,
        namespace: &str,
        name: &str,
        dry_run: bool,
    ) -> Result<Option<Reserved>, IpError> {
        if !self.cidr.contains(ip) {
            return Err(IpError::OutOfRange);
        }
        if !self.cidr.is_usable(ip) {
            return Err(IpError::Reserved);
        }
        let addresses = self.addresses()?;
        if dry_run {
            return match addresses.get(None, &ip.to_string()).await {
                Ok(_) => Err(IpError::Taken),
                Err(e) if is_not_found(&e) => Ok(None),
                Err(e) => Err(e.into()),
            };
        }
        let created = addresses
            .create(
                None,
                ip_address(ip, namespace, name),
                &WriteOptions::default(),
            )
            .await;
        match created {
            Ok(written) => Ok(Some(Reserved {
                ip,
                uid: meta_str(&written.object, "uid").to_owned(),
            })),
            Err(e) if ApiError::is_already_exists(&e) => Err(IpError::Taken),
            Err(e) => Err(e.into()),
        }
    }

    /// Reserves a free address for the Service `namespace/name`: random ones first, from the
    /// upper part of the range that upstream leaves to dynamic allocation
    /// (`ServiceIPStaticSubrange`), then the whole range in order from a random start.
    pub(crate) async fn allocate_next(
        &self,
        namespace: &str,
        name: &str,
        dry_run: bool,
    ) -> Result<(Ipv4Addr, Option<Reserved>), IpError> {
        let usable = self.cidr.usable();
        // Upstream's `calculateRangeOffset`: the lower addresses are kept for clients that ask.
        let static_band = if usable < 16 {
            0
        } else {
            (usable / 16).clamp(16, 256)
        };
        let dynamic = if static_band < usable {
            static_band..usable
        } else {
            0..usable
        };
        for _ in 0..RANDOM_TRIES {
            let offset = rand::random_range(dynamic.clone());
            let Some(ip) = self.cidr.nth(offset + 1) else {
                continue;
            };
            match self.allocate(ip, namespace, name, dry_run).await {
                Ok(reserved) => return Ok((ip, reserved)),
                Err(IpError::Taken) => {}
                Err(e) => return Err(e),
            }
        }
        // A crowded range: skip what is known to be held, and still let the create decide.
        let held: std::collections::HashSet<String> = self
            .addresses()?
            .list(None, &ListOptions::default())
            .await?
            .items
            .iter()
            .map(|item| meta_str(&item.object(), "name").to_owned())
            .collect();
        // The dynamic band from a random start, then the static band.
        let static_band = dynamic.start;
        let start = rand::random_range(0..usable - static_band);
        let order = (0..usable - static_band)
            .map(|i| static_band + (start + i) % (usable - static_band))
            .chain(0..static_band);
        for offset in order {
            let Some(ip) = self.cidr.nth(offset + 1) else {
                continue;
            };
            if held.contains(&ip.to_string()) {
                continue;
            }
            match self.allocate(ip, namespace, name, dry_run).await {
                Ok(reserved) => return Ok((ip, reserved)),
                Err(IpError::Taken) => {}
                Err(e) => return Err(e),
            }
        }
        Err(IpError::Full)
    }

    /// Undoes a reservation this allocator made (the write it was for failed).
    pub(crate) async fn undo(&self, reserved: &Reserved) {
        let Ok(addresses) = self.addresses() else {
            return;
        };
        let options = DeleteOptions {
            precondition_uid: Some(reserved.uid.clone()),
            ..DeleteOptions::default()
        };
        if let Err(error) = addresses
            .delete(None, &reserved.ip.to_string(), &options)
            .await
            && !is_not_found(&error)
        {
            tracing::warn!(ip = %reserved.ip, error = ?error.status().to_json(), "cannot release a cluster IP");
        }
    }

    /// Releases `ip` if the Service `namespace/name` holds it (it was deleted, or no longer
    /// wants a cluster IP); an address another object holds is left alone.
    pub(crate) async fn release(&self, ip: Ipv4Addr, namespace: &str, name: &str) {
        let Ok(addresses) = self.addresses() else {
            return;
        };
        let key = ip.to_string();
        let current = match addresses.get(None, &key).await {
            Ok(current) => current,
            Err(_) => return,
        };
        if !held_by(&current, namespace, name) {
            return;
        }
        let options = DeleteOptions {
            precondition_uid: Some(meta_str(&current, "uid").to_owned()),
            ..DeleteOptions::default()
        };
        if let Err(error) = addresses.delete(None, &key, &options).await
            && !is_not_found(&error)
        {
            tracing::warn!(%ip, error = ?error.status().to_json(), "cannot release a cluster IP");
        }
    }
}
