#!/usr/bin/env python3
"""End to end: the official Python `kubernetes` client against a running `capstan server`.

Usage: client_e2e.py KUBECONFIG

The server must run with `--etcd-compaction-interval 1s` (the compacted-watch check waits for a
compaction). Every check prints one `ok:` line; the first failed check prints what was expected,
what the server answered, and exits with status 1. The last line on success is `ALL CHECKS PASSED`.
"""

import inspect
import json
import sys
import threading
import time
import traceback

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

NS = "py-e2e"
LABELS = {"app": "pyshop"}


class CheckFailed(Exception):
    pass


def check(condition, what, *details):
    """Asserts `condition`; `details` (anything printable) explain a failure."""
    if not condition:
        lines = [f"FAILED: {what}"] + [f"  {d}" for d in details]
        raise CheckFailed("\n".join(lines))
    print(f"ok: {what}", flush=True)


def check_eq(actual, expected, what):
    check(actual == expected, what, f"expected: {expected!r}", f"actual:   {actual!r}")


def api_error(call, *args, **kwargs):
    """Runs `call`, which must fail with an ApiException; returns (exception, JSON body or None)."""
    try:
        result = call(*args, **kwargs)
    except ApiException as e:
        try:
            body = json.loads(e.body) if e.body else None
        except ValueError:
            body = None
        return e, body
    shown = client.ApiClient().sanitize_for_serialization(result)
    raise CheckFailed(f"FAILED: {call.__name__}{args[:2]} succeeded, an ApiException was "
                      f"expected; it returned:\n  {json.dumps(shown)[:2000]}")


def expect_status(what, status, reason, call, *args, **kwargs):
    """`call` fails with HTTP `status` and a Status body of `reason`; returns the body."""
    e, body = api_error(call, *args, **kwargs)
    details = [f"HTTP status {e.status} {e.reason}", f"body: {e.body}"]
    check(e.status == status, f"{what}: HTTP {status}", *details)
    check(isinstance(body, dict) and body.get("kind") == "Status"
          and body.get("apiVersion") == "v1" and body.get("status") == "Failure"
          and body.get("code") == status and body.get("reason") == reason,
          f"{what}: a v1 Status, Failure, code {status}, reason {reason}", *details)
    return body


MERGE_PATCH = "application/merge-patch+json"


def merge_patch(api_class, method_name, *args):
    """`api_class().method_name(*args)` with the body sent as a JSON merge patch.

    Clients from 36 on take `_content_type`; older ones send every dict as a strategic merge
    patch unless a default header of the ApiClient sets the Content-Type.
    """
    method = getattr(api_class(), method_name)
    if "_content_type" in inspect.signature(method).parameters:
        return method(*args, _content_type=MERGE_PATCH)
    api_client = client.ApiClient()
    api_client.set_default_header("Content-Type", MERGE_PATCH)
    return getattr(api_class(api_client), method_name)(*args)


def continue_token(list_meta):
    """The list's continue token (`var_continue` from client 35 on, `_continue` before)."""
    if hasattr(list_meta, "var_continue"):
        return list_meta.var_continue
    return list_meta._continue


def names(items):
    return [item.metadata.name for item in items]


def config_map(name, data, labels=None):
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        data=data,
    )


def deployment(name):
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, labels=dict(LABELS)),
        spec=client.V1DeploymentSpec(
            replicas=2,
            selector=client.V1LabelSelector(match_labels=dict(LABELS)),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=dict(LABELS)),
                spec=client.V1PodSpec(containers=[
                    client.V1Container(
                        name="web",
                        image="registry.local/pyshop:1.0",
                        ports=[client.V1ContainerPort(container_port=8080)],
                    ),
                ]),
            ),
        ),
    )


def create_read_list(core, apps):
    """1. Create a namespace, ConfigMaps and a Deployment; read them back; list by label and in pages."""
    ns = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
    check_eq(ns.metadata.name, NS, "create_namespace returns the namespace")
    check(ns.metadata.uid and ns.metadata.resource_version and ns.metadata.creation_timestamp,
          "the created namespace has uid, resourceVersion and creationTimestamp", ns.metadata)
    check_eq(core.read_namespace(NS).status.phase, "Active", "read_namespace: phase Active")

    created = core.create_namespaced_config_map(
        NS, config_map("settings", {"color": "blue", "size": "large"}, {**LABELS, "tier": "web"}))
    check_eq((created.metadata.namespace, created.data), (NS, {"color": "blue", "size": "large"}),
             "create_namespaced_config_map returns the object in its namespace")
    read = core.read_namespaced_config_map("settings", NS)
    check_eq((read.metadata.uid, read.metadata.resource_version, read.data, read.metadata.labels),
             (created.metadata.uid, created.metadata.resource_version, created.data,
              {**LABELS, "tier": "web"}),
             "read_namespaced_config_map returns what was created")
    for i in range(5):
        core.create_namespaced_config_map(
            NS, config_map(f"page-{i}", {"i": str(i)}, {**LABELS, "tier": "page"}))
    core.create_namespaced_config_map(NS, config_map("unlabelled", {"x": "y"}))

    made = apps.create_namespaced_deployment(NS, deployment("pyshop"))
    check_eq(made.metadata.generation, 1, "a created Deployment is at generation 1")
    read = apps.read_namespaced_deployment("pyshop", NS)
    check_eq((read.metadata.uid, read.spec.replicas, read.spec.template.spec.containers[0].image),
             (made.metadata.uid, 2, "registry.local/pyshop:1.0"),
             "read_namespaced_deployment returns what was created")

    # Label selectors: equality, set-based, and on Deployments.
    listed = core.list_namespaced_config_map(NS, label_selector="app=pyshop")
    check_eq(sorted(names(listed.items)),
             ["page-0", "page-1", "page-2", "page-3", "page-4", "settings"],
             "list_namespaced_config_map with label_selector app=pyshop")
    check(listed.metadata.resource_version, "the list has a resourceVersion", listed.metadata)
    listed = core.list_namespaced_config_map(NS, label_selector="tier in (web),app")
    check_eq(names(listed.items), ["settings"], "set-based label selector 'tier in (web),app'")
    listed = core.list_namespaced_config_map(NS, label_selector="!tier")
    check("unlabelled" in names(listed.items) and "settings" not in names(listed.items),
          "label selector '!tier' selects only the unlabelled ConfigMaps", names(listed.items))
    listed = apps.list_namespaced_deployment(NS, label_selector="app=pyshop")
    check_eq(names(listed.items), ["pyshop"], "list_namespaced_deployment with a label selector")
    listed = apps.list_deployment_for_all_namespaces(label_selector="app=pyshop")
    check_eq([(d.metadata.namespace, d.metadata.name) for d in listed.items], [(NS, "pyshop")],
             "list_deployment_for_all_namespaces with a label selector")

    # Paging with limit + _continue, with a label selector: pages of 2, 2 and 1, in name order,
    # every page at the first page's resourceVersion.
    pages = []
    token = None
    first_rv = None
    while True:
        page = core.list_namespaced_config_map(NS, label_selector="tier=page", limit=2,
                                               _continue=token)
        pages.append(names(page.items))
        first_rv = first_rv or page.metadata.resource_version
        check_eq(page.metadata.resource_version, first_rv,
                 f"page {len(pages)} is served at the first page's resourceVersion")
        token = continue_token(page.metadata)
        if not token:
            break
        if len(pages) >= 10:
            raise CheckFailed(f"FAILED: paging does not end; pages so far: {pages}")
    check_eq(pages, [["page-0", "page-1"], ["page-2", "page-3"], ["page-4"]],
             "limit=2 with _continue pages through the selected ConfigMaps in name order")

    # Without a selector, the first page tells how many items remain.
    everything = names(core.list_namespaced_config_map(NS).items)
    page = core.list_namespaced_config_map(NS, limit=3)
    check_eq(names(page.items), everything[:3], "limit=3 returns the first three items")
    check(continue_token(page.metadata), "a partial page has a continue token", page.metadata)
    check_eq(page.metadata.remaining_item_count, len(everything) - 3,
             "a partial page without selectors has remainingItemCount")
    rest = core.list_namespaced_config_map(NS, limit=100, _continue=continue_token(page.metadata))
    check_eq(names(rest.items), everything[3:], "the continued page returns the rest")
    check(not continue_token(rest.metadata) and rest.metadata.remaining_item_count is None,
          "the last page has no continue token and no remainingItemCount", rest.metadata)


def patch_replace_delete(core, apps):
    """2. and 3. Strategic merge, JSON merge and JSON patches; replace; a stale replace; delete."""
    # The client's default for a dict body is a strategic merge patch: containers merge by name.
    before = apps.read_namespaced_deployment("pyshop", NS)
    patched = apps.patch_namespaced_deployment("pyshop", NS, {
        "metadata": {"labels": {"patched": "strategic"}},
        "spec": {"template": {"spec": {"containers": [
            {"name": "web", "env": [{"name": "MODE", "value": "fast"}]},
        ]}}},
    })
    containers = patched.spec.template.spec.containers
    check_eq(len(containers), 1, "strategic merge patch: containers merge by name")
    check_eq((containers[0].image, containers[0].env[0].name, containers[0].env[0].value,
              containers[0].ports[0].container_port),
             ("registry.local/pyshop:1.0", "MODE", "fast", 8080),
             "strategic merge patch: the env is added, image and ports are kept")
    check_eq(patched.metadata.labels, {**LABELS, "patched": "strategic"},
             "strategic merge patch: labels are merged")
    check_eq(patched.metadata.generation, before.metadata.generation + 1,
             "a spec change increments the generation")
    check(patched.metadata.resource_version != before.metadata.resource_version,
          "a patch changes the resourceVersion", before.metadata, patched.metadata)

    # A JSON merge patch replaces lists whole.
    merged = merge_patch(client.AppsV1Api, "patch_namespaced_deployment", "pyshop", NS, {
        "spec": {"template": {"spec": {"containers": [
            {"name": "web", "image": "registry.local/pyshop:2.0"},
        ]}}},
    })
    container = merged.spec.template.spec.containers[0]
    check_eq((len(merged.spec.template.spec.containers), container.image, container.env,
              container.ports),
             (1, "registry.local/pyshop:2.0", None, None),
             "JSON merge patch replaces the containers list (env and ports gone)")

    # On a ConfigMap: a JSON merge patch with null removes a key; a list body is a JSON patch.
    cm = merge_patch(client.CoreV1Api, "patch_namespaced_config_map", "settings", NS,
                     {"data": {"size": None, "shape": "round"}})
    check_eq(cm.data, {"color": "blue", "shape": "round"},
             "JSON merge patch: null removes a key, a new key is added")
    cm = core.patch_namespaced_config_map("settings", NS, [
        {"op": "test", "path": "/data/color", "value": "blue"},
        {"op": "replace", "path": "/data/color", "value": "green"},
    ])
    check_eq(cm.data, {"color": "green", "shape": "round"}, "JSON patch (a list body)")
    body = expect_status("a JSON patch whose test fails", 422, "Invalid",
                         core.patch_namespaced_config_map, "settings", NS,
                         [{"op": "test", "path": "/data/color", "value": "purple"}])

    # Replace with the resourceVersion just read; then with the same, now stale, object.
    read = core.read_namespaced_config_map("settings", NS)
    read.data = {"color": "red"}
    replaced = core.replace_namespaced_config_map("settings", NS, read)
    check_eq(replaced.data, {"color": "red"}, "replace_namespaced_config_map with the read resourceVersion")
    check(replaced.metadata.resource_version != read.metadata.resource_version,
          "replace changes the resourceVersion", read.metadata, replaced.metadata)
    check_eq(core.read_namespaced_config_map("settings", NS).data, {"color": "red"},
             "the replaced data is stored")
    read.data = {"color": "stale"}
    body = expect_status("replace with a stale resourceVersion", 409, "Conflict",
                         core.replace_namespaced_config_map, "settings", NS, read)
    check("the object has been modified; please apply your changes to the latest version and try again"
          in body.get("message", ""), "the 409 says the object has been modified", body)
    check_eq((body.get("details") or {}).get("name"), "settings", "the 409 names the object")
    check_eq(core.read_namespaced_config_map("settings", NS).data, {"color": "red"},
             "the stale replace changed nothing")

    # Replace a Deployment with its read resourceVersion.
    dep = apps.read_namespaced_deployment("pyshop", NS)
    dep.spec.replicas = 5
    replaced = apps.replace_namespaced_deployment("pyshop", NS, dep)
    check_eq((replaced.spec.replicas, replaced.metadata.generation),
             (5, dep.metadata.generation + 1), "replace_namespaced_deployment")
    dep.spec.replicas = 7
    expect_status("Deployment replace with a stale resourceVersion", 409, "Conflict",
                  apps.replace_namespaced_deployment, "pyshop", NS, dep)

    # Delete; the objects are gone.
    core.delete_namespaced_config_map("unlabelled", NS)
    expect_status("read after delete", 404, "NotFound",
                  core.read_namespaced_config_map, "unlabelled", NS)
    apps.delete_namespaced_deployment("pyshop", NS)
    expect_status("Deployment read after delete", 404, "NotFound",
                  apps.read_namespaced_deployment, "pyshop", NS)
    check_eq(apps.list_namespaced_deployment(NS).items, [], "no Deployments remain")
    expect_status("delete of a deleted object", 404, "NotFound",
                  core.delete_namespaced_config_map, "unlabelled", NS)


def watch_during(core, writes, until, **kwargs):
    """Watches the namespace's ConfigMaps from a list's resourceVersion while `writes` runs in a
    thread (from a second after the watch began); returns the list's resourceVersion and the
    events up to the first one `until` accepts. Watching starts at once after the list: with a
    compaction every second, a resourceVersion a few seconds old may be gone.
    """
    start_rv = core.list_namespaced_config_map(NS).metadata.resource_version
    failures = []

    def writer():
        try:
            time.sleep(1.0)
            writes()
        except Exception:  # reported by the main thread
            failures.append(traceback.format_exc())

    thread = threading.Thread(target=writer)
    thread.start()
    events = []
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_config_map, NS, resource_version=start_rv,
                          timeout_seconds=20, **kwargs):
        events.append(event)
        if until(event):
            w.stop()
            break
    thread.join()
    check(not failures, "the writes made while watching succeeded", *failures)
    summary = [(e["type"], e["object"].metadata.name) for e in events]
    check(events and until(events[-1]), "the watch saw the awaited event before its timeout",
          summary)
    return start_rv, events


def watch_changes(core):
    """4. A watch from a list's resourceVersion sees ADDED, MODIFIED and DELETED as they happen."""
    def writes():
        core.create_namespaced_config_map(NS, config_map("watched", {"step": "1"}, LABELS))
        core.patch_namespaced_config_map("watched", NS, {"data": {"step": "2"}})
        core.delete_namespaced_config_map("watched", NS)

    start_rv, events = watch_during(
        core, writes,
        lambda e: e["type"] == "DELETED" and e["object"].metadata.name == "watched")
    seen = [(e["type"], e["object"].metadata.name, (e["object"].data or {}).get("step"))
            for e in events]
    check_eq(seen, [("ADDED", "watched", "1"), ("MODIFIED", "watched", "2"),
                    ("DELETED", "watched", "2")],
             "watch.Watch().stream sees ADDED, MODIFIED and DELETED in order")
    check(all(type(e["object"]) is client.V1ConfigMap for e in events),
          "the client decodes the events' objects as V1ConfigMap",
          [type(e["object"]) for e in events])
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    check(rvs == sorted(rvs) and len(set(rvs)) == len(rvs) and rvs[0] > int(start_rv),
          "the events' resourceVersions increase from the watch's start", rvs, start_rv)

    # With a label selector, only selected objects are seen.
    def writes():
        core.create_namespaced_config_map(NS, config_map("quiet", {"a": "b"}))
        core.create_namespaced_config_map(NS, config_map("loud", {"a": "b"}, {"watch": "me"}))

    _, events = watch_during(core, writes, lambda e: True, label_selector="watch=me")
    check_eq([(e["type"], e["object"].metadata.name) for e in events], [("ADDED", "loud")],
             "a watch with a label selector skips unselected objects")


def compacted_watch(core):
    """5. After a compaction, a watch from an older resourceVersion is answered 410 Expired."""
    old_rv = core.list_namespaced_config_map(NS).metadata.resource_version
    for i in range(4):
        core.create_namespaced_config_map(NS, config_map(f"churn-{i}", {"i": str(i)}))
        core.delete_namespaced_config_map(f"churn-{i}", NS)

    # Wait for a compaction past old_rv, reading the raw watch response: upstream answers a watch
    # from a compacted resourceVersion with HTTP 200 and one ERROR event carrying a 410 Status.
    deadline = time.monotonic() + 30
    while True:
        resp = core.list_namespaced_config_map(NS, watch=True, resource_version=old_rv,
                                               timeout_seconds=2, _preload_content=False)
        try:
            status = resp.status
            first = resp.readline() if hasattr(resp, "readline") else None
            if first is None:
                first = next(resp.stream(65536, decode_content=True), b"").split(b"\n")[0]
        finally:
            resp.close()
            resp.release_conn()
        event = json.loads(first) if first.strip() else None
        if event and event.get("type") == "ERROR":
            break
        check(time.monotonic() < deadline, "a compaction happens within 30s (interval 1s)",
              f"watch from resourceVersion {old_rv} still answers: HTTP {status} {first!r}")
        time.sleep(1)
    check_eq(status, 200, "a watch from a compacted resourceVersion is answered HTTP 200")
    obj = event["object"]
    check(obj.get("kind") == "Status" and obj.get("status") == "Failure"
          and obj.get("code") == 410 and obj.get("reason") == "Expired",
          "its ERROR event carries a Status of code 410, reason Expired", event)

    # What the client does with it: watch.Watch().stream raises ApiException(410) (with
    # timeout_seconds given it does not retry; without, it retries once and then raises).
    for kwargs in ({"timeout_seconds": 5}, {}):
        w = watch.Watch()
        got = []
        try:
            for event in w.stream(core.list_namespaced_config_map, NS, resource_version=old_rv,
                                  **kwargs):
                got.append(event)
                if len(got) > 20:
                    break
        except ApiException as e:
            check(e.status == 410 and str(e.reason).startswith("Expired: "),
                  f"watch.Watch().stream({kwargs}) from a compacted resourceVersion raises "
                  "ApiException 410 'Expired: ...'", f"status {e.status}, reason {e.reason!r}")
        else:
            raise CheckFailed(f"FAILED: watch.Watch().stream({kwargs}) from compacted "
                              f"resourceVersion {old_rv} raised nothing; events: {got}")

    # A watch from the current resourceVersion still works after the compaction.
    _, events = watch_during(
        core,
        lambda: core.create_namespaced_config_map(NS, config_map("after-compaction", {"a": "b"})),
        lambda e: True)
    check_eq([(e["type"], e["object"].metadata.name) for e in events],
             [("ADDED", "after-compaction")],
             "a watch from the current resourceVersion after the compaction sees new objects")


def errors(core, apps):
    """6. 404 on a missing object; 422 Invalid with field causes; 409 AlreadyExists."""
    body = expect_status("read of a missing ConfigMap", 404, "NotFound",
                         core.read_namespaced_config_map, "missing", NS)
    check_eq(body.get("message"), 'configmaps "missing" not found', "the 404 message")
    check_eq(body.get("details"), {"name": "missing", "kind": "configmaps"}, "the 404 details")
    body = expect_status("read of a Deployment in a missing namespace", 404, "NotFound",
                         apps.read_namespaced_deployment, "pyshop", "no-such-namespace")
    check_eq(body.get("details"), {"name": "pyshop", "group": "apps", "kind": "deployments"},
             "the Deployment 404 details name the group")

    body = expect_status("create of a ConfigMap named Bad_Name", 422, "Invalid",
                         core.create_namespaced_config_map, NS, config_map("Bad_Name", {"a": "b"}))
    details = body.get("details") or {}
    check_eq((details.get("name"), details.get("kind")), ("Bad_Name", "ConfigMap"),
             "the 422 details name the object and kind")
    causes = details.get("causes") or []
    check(any(c.get("field") == "metadata.name" and c.get("reason") == "FieldValueInvalid"
              and "Bad_Name" in c.get("message", "") for c in causes),
          "the 422 has a FieldValueInvalid cause on metadata.name", body)
    check(body.get("message", "").startswith('ConfigMap "Bad_Name" is invalid: metadata.name: '
                                              'Invalid value: "Bad_Name"'),
          "the 422 message", body)

    bad_deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad"},
        "spec": {"replicas": -1, "selector": {"matchLabels": {"app": "one"}},
                 "template": {"metadata": {"labels": {"app": "other"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }
    body = expect_status("create of an invalid Deployment", 422, "Invalid",
                         apps.create_namespaced_deployment, NS, bad_deployment)
    fields = sorted(c.get("field") for c in (body.get("details") or {}).get("causes") or [])
    check("spec.replicas" in fields and "spec.template.metadata.labels" in fields,
          "every field error at once: replicas and the selector mismatch", body)

    body = expect_status("create of an existing ConfigMap", 409, "AlreadyExists",
                         core.create_namespaced_config_map, NS, config_map("settings", {}))
    check_eq(body.get("message"), 'configmaps "settings" already exists', "the AlreadyExists message")


APPLY_PATCH = "application/apply-patch+yaml"


def server_side_apply(core, apps):
    """6. Server-side apply: create, share a field, conflict, force, drop a field."""
    def apply(name, data, manager, force=None):
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
        kwargs = {"field_manager": manager, "_content_type": APPLY_PATCH}
        if force is not None:
            kwargs["force"] = force
        return core.patch_namespaced_config_map(name, NS, body, **kwargs)

    created = apply("ssa", {"a": "1", "b": "1"}, "py-one")
    check_eq(created.data, {"a": "1", "b": "1"}, "an apply creates the object")
    entries = [(e.manager, e.operation) for e in created.metadata.managed_fields]
    check_eq(entries, [("py-one", "Apply")], "the applier is recorded")
    shared = apply("ssa", {"a": "1"}, "py-two")
    managers = sorted(e.manager for e in shared.metadata.managed_fields)
    check_eq(managers, ["py-one", "py-two"], "the same value is shared without conflict")
    body = expect_status("a different value owned by another manager", 409, "Conflict",
                         apply, "ssa", {"a": "1", "b": "2"}, "py-two")
    check(body["message"] == 'Apply failed with 1 conflict: conflict with "py-one": .data.b',
          "the conflict names the manager and the field", body)
    check_eq(body["details"]["causes"][0]["reason"], "FieldManagerConflict", "conflict cause")
    forced = apply("ssa", {"a": "1", "b": "2"}, "py-two", force=True)
    check_eq(forced.data, {"a": "1", "b": "2"}, "force takes the field")
    dropped = apply("ssa", {"a": "1"}, "py-two")
    check_eq(dropped.data, {"a": "1"}, "a field its only owner stops applying is removed")
    kept = apply("ssa", {}, "py-two")
    check_eq(kept.data, {"a": "1"}, "a field another manager still owns stays")
    missing = expect_status("an apply without fieldManager", 422, "Invalid",
                            core.patch_namespaced_config_map, "ssa", NS,
                            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}},
                            _content_type=APPLY_PATCH)
    check("fieldManager" in missing["message"], "the error names fieldManager", missing)
    core.delete_namespaced_config_map("ssa", NS)


def raw_get(core, path, headers=None):
    """GET `path` with the client's connection and credentials: (status, headers, body bytes)."""
    api_client = core.api_client
    headers = dict(headers or {})
    token = api_client.configuration.get_api_key_with_prefix("BearerToken")
    if token:
        headers["Authorization"] = token
    response = api_client.rest_client.pool_manager.request(
        "GET", api_client.configuration.host + path, headers=headers)
    return response.status, response.headers, response.data


def snake(name):
    """`insecureSkipTLSVerifyBackend` -> `insecure_skip_tls_verify_backend`, as the client names
    parameters and methods."""
    out = ""
    for i, c in enumerate(name):
        upper_run_ends = i + 1 < len(name) and name[i + 1].islower()
        if c.isupper() and i > 0 and (not name[i - 1].isupper() or upper_run_ends):
            out += "_"
        out += c.lower()
    return out


def client_query_params(method):
    """The query parameters a generated client method sends: its documented parameters other
    than the path's and the client's own options (every client version documents them)."""
    params = set()
    for line in (method.__doc__ or "").splitlines():
        line = line.strip()
        if line.startswith(":param "):
            name = line[len(":param "):].split(":", 1)[0].strip()
            if not name.startswith("_") and name not in ("async_req", "name", "namespace"):
                params.add(name)
    return params


# The pod subresources served by the node: the client's method, its path.
STREAMED = [
    ("read_namespaced_pod_log", "log", "get"),
    ("connect_get_namespaced_pod_exec", "exec", "get"),
    ("connect_post_namespaced_pod_exec", "exec", "post"),
    ("connect_get_namespaced_pod_attach", "attach", "get"),
    ("connect_post_namespaced_pod_attach", "attach", "post"),
    ("connect_get_namespaced_pod_portforward", "portforward", "get"),
    ("connect_post_namespaced_pod_portforward", "portforward", "post"),
]


def check_streamed_operations(core, document, version):
    """Each method the client calls for a streamed pod subresource is an operation of the served
    `document` (its id, without the group-version, is the method's name) that declares every
    query parameter the client may send."""
    for method_name, sub, http_method in STREAMED:
        path = f"/api/v1/namespaces/{{namespace}}/pods/{{name}}/{sub}"
        item = document["paths"].get(path, {})
        op = item.get(http_method, {})
        op_id = op.get("operationId", "")
        check_eq(snake(op_id.replace("CoreV1", "", 1)), method_name,
                 f"{version}: {http_method.upper()} {path} is the client's {method_name}")
        declared = {snake(p["name"]) for p in item.get("parameters", []) + op.get("parameters", [])
                    if p.get("in") == "query"}
        sent = client_query_params(getattr(core, method_name))
        check(sent and sent <= declared,
              f"{version}: {op_id} declares the query parameters {method_name} sends",
              f"client: {sorted(sent)}", f"served: {sorted(declared)}")


def openapi(core):
    """7. The OpenAPI documents describe the log and connect operations the client calls, and
    /openapi/v3 documents are cached by their hash."""
    status, _, body = raw_get(core, "/openapi/v2", {"Accept": "application/json"})
    check_eq(status, 200, "GET /openapi/v2")
    check_streamed_operations(core, json.loads(body), "v2")

    status, _, body = raw_get(core, "/openapi/v3")
    check_eq(status, 200, "GET /openapi/v3")
    url = json.loads(body)["paths"]["api/v1"]["serverRelativeURL"]
    status, headers, body = raw_get(core, url)
    check_eq(status, 200, f"GET {url}")
    check_streamed_operations(core, json.loads(body), "v3")
    etag = headers.get("ETag", "")
    check_eq(etag, '"' + url.split("hash=", 1)[1] + '"', "the v3 document's ETag is its hash")
    status, _, _ = raw_get(core, url, {"If-None-Match": etag})
    check_eq(status, 304, "the v3 document is not sent again for its ETag")


def delete_namespace(core):
    core.delete_namespace(NS)
    try:
        phase = core.read_namespace(NS).status.phase
    except ApiException as e:
        phase = "gone" if e.status == 404 else f"error {e.status}"
    check(phase in ("Terminating", "gone"), "a deleted namespace is Terminating or gone", phase)


def admission_policy(apps):
    """A ValidatingAdmissionPolicy bound with Deny refuses a Deployment with its message."""
    policies = client.AdmissionregistrationV1Api()
    name = f"py-replicas-{NS}"
    policies.create_validating_admission_policy(body={
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <= 3",
                             "message": "at most 3 replicas"}],
        },
    })
    read = policies.read_validating_admission_policy(name)
    check_eq(read.spec.failure_policy, "Fail", "the policy's failure policy defaults to Fail")
    policies.create_validating_admission_policy_binding(body={
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {
                     "matchLabels": {"kubernetes.io/metadata.name": NS}}}},
    })
    big = deployment("py-too-big")
    big.spec.replicas = 5
    body = expect_status("a Deployment over the policy's limit", 422, "Invalid",
                         apps.create_namespaced_deployment, NS, big)
    message = (f"ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: "
               "at most 3 replicas")
    check_eq(body.get("message"), f'deployments.apps "py-too-big" is forbidden: {message}',
             "the refusal's message")
    check_eq(body.get("details", {}).get("causes"), [{"message": message}],
             "the refusal's one cause")
    small = deployment("py-small")
    small.spec.replicas = 3
    apps.create_namespaced_deployment(NS, small)
    policies.delete_validating_admission_policy_binding(name)
    policies.delete_validating_admission_policy(name)


def custom_resources():
    """A CRD applied through ApiextensionsV1Api and its objects through CustomObjectsApi:
    served, defaulted and pruned; an invalid object refused with its field path and CEL message."""
    extensions = client.ApiextensionsV1Api()
    custom = client.CustomObjectsApi()
    group, plural = "pyshop.example.com", f"widgets{NS.replace('-', '')}"
    name = f"{plural}.{group}"
    extensions.create_custom_resource_definition(body={
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": "PyWidget"},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object",
                        "x-kubernetes-validations": [
                            {"rule": "self.size <= 10", "message": "size is at most 10"}],
                        "properties": {
                            "size": {"type": "integer", "default": 1},
                            "color": {"type": "string", "enum": ["red", "blue"]},
                        },
                    }},
                }},
            }],
        },
    })
    deadline = time.time() + 30
    while True:
        crd = extensions.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in (crd.status.conditions or [])}
        if conditions.get("Established") == "True":
            break
        check(time.time() < deadline, "the CRD is established within 30 s", conditions)
        time.sleep(0.2)
    made = custom.create_namespaced_custom_object(group, "v1", NS, plural, {
        "apiVersion": f"{group}/v1", "kind": "PyWidget",
        "metadata": {"name": "w1"}, "spec": {"color": "red", "unknown": "pruned"},
    })
    check_eq(made["spec"], {"color": "red", "size": 1},
             "the new object is defaulted and its unknown field pruned")
    listed = custom.list_namespaced_custom_object(group, "v1", NS, plural)
    check_eq([i["metadata"]["name"] for i in listed["items"]], ["w1"], "the object is listed")
    def refused(spec):
        return expect_status("an invalid custom object", 422, "Invalid",
                             custom.create_namespaced_custom_object, group, "v1", NS, plural, {
                                 "apiVersion": f"{group}/v1", "kind": "PyWidget",
                                 "metadata": {"name": "w2"}, "spec": spec,
                             })

    def causes(body):
        return sorted((c.get("field"), c.get("reason")) for c in body["details"]["causes"])

    body = refused({"color": "red", "size": 11})
    check_eq(causes(body), [("spec", "FieldValueInvalid")], "the CEL rule's field")
    check(body["message"].endswith('spec: Invalid value: "object": size is at most 10'),
          "the CEL rule's message is given", body["message"])
    # A value the schema refuses keeps the CEL rules from running, as upstream says.
    body = refused({"color": "green", "size": 11})
    check_eq(causes(body), [("<nil>", "FieldValueInvalid"), ("spec.color", "FieldValueNotSupported")],
             "the refusal names each field")
    check("some validation rules were not checked because the object was invalid" in body["message"],
          "the unchecked rules are said", body["message"])
    extensions.delete_custom_resource_definition(name)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    import kubernetes
    print(f"python {sys.version.split()[0]}, kubernetes client {kubernetes.__version__}", flush=True)
    config.load_kube_config(config_file=sys.argv[1])
    core = client.CoreV1Api()
    apps = client.AppsV1Api()
    steps = [
        ("create, read and list", lambda: create_read_list(core, apps)),
        ("patch, replace and delete", lambda: patch_replace_delete(core, apps)),
        ("watch", lambda: watch_changes(core)),
        ("compacted watch", lambda: compacted_watch(core)),
        ("errors", lambda: errors(core, apps)),
        ("server-side apply", lambda: server_side_apply(core, apps)),
        ("admission policy", lambda: admission_policy(apps)),
        ("custom resources", custom_resources),
        ("namespace deletion", lambda: delete_namespace(core)),
        ("openapi", lambda: openapi(core)),
    ]
    for title, step in steps:
        print(f"== {title}", flush=True)
        try:
            step()
        except CheckFailed as failure:
            print(failure, flush=True)
            return 1
        except ApiException as e:
            print(f"FAILED in '{title}': unexpected ApiException\n{e}", flush=True)
            traceback.print_exc(file=sys.stdout)
            return 1
        except Exception:
            print(f"FAILED in '{title}': unexpected exception", flush=True)
            traceback.print_exc(file=sys.stdout)
            return 1
    print("ALL CHECKS PASSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
