//! Discovery documents, generated from the catalogue: `/api`, `/apis`, `/apis/<group>`, and the
//! resource lists of each group-version, in upstream's shape (what `kubectl api-resources` and
//! `kubectl api-versions` print from).

use capstan_api::catalog::{self, Resource};
use serde_json::{Value, json};

/// `/api`: the core group's versions.
pub(crate) fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group(name: &str) -> Value {
    let versions: Vec<Value> = catalog::versions(name)
        .into_iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": name, "versions": versions, "preferredVersion": preferred})
}

/// `/apis`: every named group.
pub(crate) fn api_group_list() -> Value {
    let groups: Vec<Value> = catalog::groups().into_iter().map(group).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, if the group is served.
pub(crate) fn api_group(name: &str) -> Option<Value> {
    if !catalog::groups().contains(&name) {
        return None;
    }
    let mut doc = group(name);
    doc["kind"] = "APIGroup".into();
    doc["apiVersion"] = "v1".into();
    Some(doc)
}

fn resource_entry(r: &Resource) -> Value {
    let mut entry = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        entry["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        entry["categories"] = json!(r.categories);
    }
    entry
}

/// `/api/v1` or `/apis/<group>/<version>`, if served.
pub(crate) fn api_resource_list(group: &str, version: &str) -> Option<Value> {
    let mut entries: Vec<Value> = Vec::new();
    for r in catalog::resources_in(group, version) {
        entries.push(resource_entry(r));
        for sub in r.subresources {
            let mut entry = json!({
                "name": format!("{}/{}", r.plural, sub.name),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": sub.kind,
                "verbs": sub.verbs,
            });
            if let Some((g, v)) = sub.group_version {
                entry["group"] = g.into();
                entry["version"] = v.into();
            }
            entries.push(entry);
        }
    }
    if entries.is_empty() {
        return None;
    }
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resources_are_listed_with_subresources_in_name_order() {
        let doc = api_resource_list("", "v1").unwrap();
        let names: Vec<&str> = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert!(names.contains(&"pods/status") && names.contains(&"pods/eviction"));
        let pods = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods")
            .unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        let eviction = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods/eviction")
            .unwrap();
        assert_eq!(eviction["group"], "policy");
        assert!(api_resource_list("apps", "v2").is_none());
    }

    #[test]
    fn groups_prefer_their_first_version() {
        let apps = api_group("apps").unwrap();
        assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");
        assert_eq!(apps["kind"], "APIGroup");
        assert!(api_group("nope.example.com").is_none());
        let list = api_group_list();
        assert!(
            list["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == "batch")
        );
    }
}
