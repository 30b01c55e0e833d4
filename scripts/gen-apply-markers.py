#!/usr/bin/env python3
"""Generate crates/capstan-api/src/apply/markers.rs, the merge structure server-side apply needs.

Usage:
    scripts/gen-apply-markers.py DIR... [--out PATH]

Each DIR is a source tree of a Kubernetes staging repository at the API level Capstan serves
(k8s.io/api, apimachinery, apiextensions-apiserver and kube-aggregator at v0.33.0, e.g.
`git archive v0.33.0 | tar -x -C DIR` in a clone of each). The script reads every
`generated.proto` under them: upstream's protobuf definitions carry the Go comments of each type
and field, including the code-generation markers that upstream's OpenAPI documents publish as
`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`, `x-kubernetes-map-type` and
`x-kubernetes-patch-*`, and the `+default=` values of fields.

What it writes, per protobuf message and field number (the same keys as the protobuf schema
table, `protobuf/schema.rs`):
  * LISTS: every list that is not atomic, with how server-side apply merges it. The rule is
    kube-openapi's (`schemaconv`): `+listType` decides; without it, `+patchStrategy=merge` makes a
    map keyed by `+patchMergeKey` or, without a key, a set; anything else is atomic.
  * ATOMIC_MAPS: map fields marked `+mapType=atomic`.
  * ATOMIC_STRUCTS: messages marked `+structType=atomic` (or `+mapType=atomic`).
  * DEFAULTS: scalar `+default=` values of fields that are keys of some keyed list (an item
    that omits such a key is identified by the default, as upstream does).

The output is deterministic; rerun after bumping the inputs and commit the result.
"""

import json
import os
import re
import sys

FIELD = re.compile(
    r"^\s*(optional|repeated)?\s*(map<\s*\w+\s*,\s*[\w.]+\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;")


def parse_proto(path):
    package = None
    messages = {}  # full name -> {"markers": [...], "fields": {tag: (name, type, repeated, markers)}}
    comments = []
    current = None
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if line.startswith("//"):
                comments.append(line[2:].strip())
                continue
            if not line:
                comments = []
                continue
            m = re.match(r"^package\s+([\w.]+)\s*;", line)
            if m:
                package = m.group(1)
                comments = []
                continue
            m = re.match(r"^message\s+(\w+)\s*\{", line)
            if m:
                name = f"{package}.{m.group(1)}"
                current = {"markers": markers(comments), "fields": {}}
                messages[name] = current
                comments = []
                continue
            if line.startswith("}"):
                current = None
                comments = []
                continue
            m = FIELD.match(line)
            if m and current is not None:
                label, ty, fname, tag = m.groups()
                current["fields"][int(tag)] = {
                    "name": fname,
                    "type": ty,
                    "repeated": label == "repeated",
                    "map": ty.startswith("map<"),
                    "markers": markers(comments),
                }
            comments = []
    return messages


def markers(comments):
    out = {}
    for c in comments:
        m = re.match(r"^\+([\w-]+)=(.*)$", c)
        if m:
            out.setdefault(m.group(1), []).append(m.group(2).strip())
    return out


def list_relationship(field):
    mk = field["markers"]
    lt = mk.get("listType", [None])[0]
    if lt == "atomic":
        return None
    if lt == "set":
        return ("set", [])
    if lt == "map":
        return ("map", mk.get("listMapKey", []))
    strategy = mk.get("patchStrategy", [None])[0]
    if strategy in ("merge", "merge,retainKeys"):
        key = mk.get("patchMergeKey", [None])[0]
        return ("map", [key]) if key else ("set", [])
    return None


def main():
    args = sys.argv[1:]
    out = None
    if "--out" in args:
        i = args.index("--out")
        out = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    messages = {}
    for root in args:
        for dirpath, _, files in os.walk(root):
            for name in files:
                if name == "generated.proto":
                    messages.update(parse_proto(os.path.join(dirpath, name)))

    lists, atomic_maps, atomic_structs, key_fields = [], [], [], set()
    for mname, msg in sorted(messages.items()):
        if msg["markers"].get("structType") == ["atomic"] or msg["markers"].get("mapType") == ["atomic"]:
            atomic_structs.append(mname)
        for tag, field in sorted(msg["fields"].items()):
            if field["repeated"]:
                rel = list_relationship(field)
                if rel:
                    lists.append((mname, tag, field["name"], rel))
                    if rel[0] == "map":
                        elem = field["type"]
                        elem = elem if "." in elem else f"{mname.rsplit('.', 1)[0]}.{elem}"
                        for key in rel[1]:
                            key_fields.add((elem, key))
            elif field["map"] and field["markers"].get("mapType") == ["atomic"]:
                atomic_maps.append((mname, tag, field["name"]))

    defaults = []
    for elem, key in sorted(key_fields):
        msg = messages.get(elem)
        if not msg:
            continue
        for tag, field in msg["fields"].items():
            if field["name"] == key and "default" in field["markers"]:
                value = field["markers"]["default"][0]
                try:
                    json.loads(value)
                except ValueError:
                    continue
                defaults.append((elem, tag, key, value))

    lines = [
        "//! Generated by `scripts/gen-apply-markers.py` from upstream's `generated.proto` files",
        "//! (k8s.io/api, apimachinery, apiextensions-apiserver, kube-aggregator v0.33.0). Do not edit.",
        "",
        "use super::schema::ListKind;",
        "",
        "/// Lists that are not atomic: (message, field number, JSON name, how items are identified).",
        "pub(super) static LISTS: &[(&str, u32, &str, ListKind)] = &[",
    ]
    for mname, tag, fname, (kind, keys) in lists:
        if kind == "set":
            lines.append(f'    ("{mname}", {tag}, "{fname}", ListKind::Set),')
        else:
            ks = ", ".join(f'"{k}"' for k in keys)
            lines.append(f'    ("{mname}", {tag}, "{fname}", ListKind::Map(&[{ks}])),')
    lines.append("];")
    lines.append("")
    lines.append("/// Map fields replaced whole by apply: (message, field number, JSON name).")
    lines.append("pub(super) static ATOMIC_MAPS: &[(&str, u32, &str)] = &[")
    for mname, tag, fname in atomic_maps:
        lines.append(f'    ("{mname}", {tag}, "{fname}"),')
    lines.append("];")
    lines.append("")
    lines.append("/// Messages replaced whole by apply.")
    lines.append("pub(super) static ATOMIC_STRUCTS: &[&str] = &[")
    for mname in atomic_structs:
        lines.append(f'    "{mname}",')
    lines.append("];")
    lines.append("")
    lines.append("/// Defaults of list keys: (message, field number, JSON name, default as JSON).")
    lines.append("pub(super) static KEY_DEFAULTS: &[(&str, u32, &str, &str)] = &[")
    for elem, tag, key, value in defaults:
        lines.append(f'    ("{elem}", {tag}, "{key}", {json.dumps(value)}),')
    lines.append("];")
    text = "\n".join(lines) + "\n"
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
