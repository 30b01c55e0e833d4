#!/usr/bin/env python3
"""Generate crates/capstan-api/src/protobuf/schema.rs, the table the protobuf decoder walks.

Usage:
    scripts/gen-protobuf-schema.py --go-src DIR [--out PATH]

Inputs (all read-only):
  * k8s-pb 0.9.0 (crate source under ~/.cargo/registry/src/*/k8s-pb-0.9.0): message names, field
    numbers, proto types and cardinality, read from the prost attributes
    (`#[prost(string, optional, tag = "3")]`, `btree_map = "string, message"`, ...).
  * k8s-openapi 0.29.0 (crate source, module v1_33): the JSON name of every field, read from each
    type's Deserialize impl (`"clusterIP" => Field::Key_cluster_ip`), and the `Resource` impls
    (apiVersion + kind of every top-level type).
  * The Go API types of the Kubernetes staging repositories at the tag matching k8s-pb
    (k8s.io/api, apimachinery, apiextensions-apiserver, kube-aggregator, metrics at v0.35.0), laid
    out as DIR/api, DIR/apimachinery, DIR/apiextensions-apiserver, DIR/kube-aggregator and
    DIR/metrics. They supply what neither crate records and the JSON form depends on: whether a Go
    field is a pointer, whether its json tag has `omitempty`, and which embedded structs are
    `json:",inline"`. Any way of getting those trees works, e.g. `git archive v0.35.0 | tar -x -C
    DIR/api` in a clone of each staging repository, or the module cache after
    `go mod download k8s.io/api@v0.35.0` and friends.

Joining: a k8s-pb module path names the proto package (`api/core/v1` is `k8s.io.api.core.v1`);
prost renamed messages to UpperCamelCase, so a message's upstream name is the Go struct of the same
package whose name matches case-insensitively. Fields are joined to Go fields by field number and to
k8s-openapi fields by name with case, `_`, `-` and `$` ignored (`cluster_ip` ~ `clusterIP`,
`x_kubernetes_embedded_resource` ~ `x-kubernetes-embedded-resource`, `r#ref` ~ `$ref`). Where
k8s-openapi has no type (API versions it does not carry) the JSON name is the Go json tag; where
neither exists, a conversion (snake_case to lowerCamelCase, with the acronym spellings learnt from
every joined pair, e.g. `ip` -> `IP`) is used. The script checks every name it takes from one source
against the others and stops on a disagreement it does not know to be harmless.

Fields of a message that k8s-openapi (1.33) has, but that its type lacks, are newer than 1.33 and
are left out: upstream 1.33 skips them as unknown fields. Messages k8s-openapi has no type for keep
all their fields.

The output is deterministic; rerun after bumping any input and commit the result. Set
GEN_VERBOSE=1 to list every name taken from a fallback and every field left out.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
from collections import Counter, defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "crates/capstan-api/src/protobuf/schema.rs")

# Go module root (under --go-src) and the proto package prefix each k8s-pb top module maps to.
PB_TOP = {
    "api": ("api", "k8s.io.api"),
    "apimachinery": ("apimachinery", "k8s.io.apimachinery"),
    "apiextensions_apiserver": ("apiextensions-apiserver", "k8s.io.apiextensions_apiserver"),
    "kube_aggregator": ("kube-aggregator", "k8s.io.kube_aggregator"),
    "metrics": ("metrics", "k8s.io.metrics"),
}

# Messages whose JSON form is not the plain object of their fields (custom MarshalJSON upstream),
# with the field numbers the decoder relies on: checked below against k8s-pb.
SPECIALS = {
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time": ("Time", {1: "int64", 2: "int32"}),
    "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime": ("MicroTime", {1: "int64", 2: "int32"}),
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration": ("Duration", {1: "int64"}),
    "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1": ("FieldsV1", {1: "bytes"}),
    "k8s.io.apimachinery.pkg.api.resource.Quantity": ("Quantity", {1: "string"}),
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": (
        "IntOrString",
        {1: "int64", 2: "int32", 3: "string"},
    ),
    "k8s.io.apimachinery.pkg.runtime.RawExtension": ("RawExtension", {1: "bytes"}),
}
for _v in ("v1", "v1beta1"):
    _p = f"k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.{_v}."
    SPECIALS[_p + "JSON"] = ("Json", {1: "bytes"})
    SPECIALS[_p + "JSONSchemaPropsOrArray"] = ("SchemaOrArray", {1: "message", 2: "message"})
    SPECIALS[_p + "JSONSchemaPropsOrBool"] = ("SchemaOrBool", {1: "bool", 2: "message"})
    SPECIALS[_p + "JSONSchemaPropsOrStringArray"] = (
        "SchemaOrStringArray",
        {1: "message", 2: "string"},
    )

# Go types registered in every group version (metav1.AddToGroupVersion); the decoder resolves
# them for any apiVersion, so they are listed once under meta.k8s.io/v1.
META_OPTION_KINDS = [
    "CreateOptions",
    "DeleteOptions",
    "GetOptions",
    "ListOptions",
    "PatchOptions",
    "UpdateOptions",
]

SCALARS = {"string", "bool", "int32", "int64", "double", "bytes"}


def fail(msg: str) -> None:
    print(f"gen-protobuf-schema: {msg}", file=sys.stderr)
    sys.exit(1)


def detail(msg: str) -> None:
    if os.environ.get("GEN_VERBOSE"):
        print(f"  {msg}", file=sys.stderr)


def norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().replace("r#", ""))


# ---------------------------------------------------------------- k8s-pb


class PbField:
    def __init__(self, tag, rust, kind, card, target):
        self.tag = tag  # field number
        self.rust = rust  # prost field name, `r#` stripped
        self.kind = kind  # scalar name or "message"
        self.card = card  # "one" | "repeated" | "map"
        self.target = target  # message full name for kind == "message"


class PbMessage:
    def __init__(self, full, module, rust_name):
        self.full = full
        self.module = module  # e.g. ("api", "core", "v1")
        self.rust_name = rust_name
        self.fields: list[PbField] = []


def find_crate(name: str) -> str:
    hits = sorted(glob.glob(os.path.expanduser(f"~/.cargo/registry/src/*/{name}")))
    if not hits:
        fail(f"crate source {name} not found under ~/.cargo/registry/src (run cargo fetch)")
    return hits[-1]


def resolve_path(module: tuple, ty: str) -> tuple[tuple, str]:
    parts = ty.split("::")
    mod = list(module)
    while parts and parts[0] == "super":
        parts.pop(0)
        mod.pop()
    return tuple(mod + parts[:-1]), parts[-1]


ATTR_RE = re.compile(r"#\[prost\((.*)\)\]\s*$")


def parse_k8s_pb(src: str):
    messages: dict[tuple, PbMessage] = {}  # (module, rust_name) -> msg
    raw_fields = []  # (msg, attr, rust_name, rust_type)
    resources = []  # (api_version, kind, module, rust_name)
    for path in sorted(glob.glob(os.path.join(src, "src/**/mod.rs"), recursive=True)):
        rel = os.path.relpath(os.path.dirname(path), os.path.join(src, "src"))
        module = tuple(rel.split(os.sep))
        if module[0] not in PB_TOP:
            fail(f"unknown k8s-pb top module {module[0]}")
        lines = open(path, encoding="utf-8").read().split("\n")
        current = None
        i = 0
        while i < len(lines):
            line = lines[i]
            m = re.match(r"pub struct (\w+) \{", line)
            if m:
                _go_root, prefix = PB_TOP[module[0]]
                full = prefix + "." + ".".join(module[1:]) + "." + m.group(1)
                current = PbMessage(full, module, m.group(1))
                messages[(module, m.group(1))] = current
            elif line.startswith("}"):
                current = None
            am = ATTR_RE.match(line.strip())
            if am and current is not None:
                decl = ""
                i += 1
                while True:
                    decl += lines[i].strip() + " "
                    if decl.rstrip().endswith(",") and decl.count("<") == decl.count(">"):
                        break
                    i += 1
                dm = re.match(r"pub (?:r#)?(\w+):\s*(.*),\s*$", decl.strip())
                if not dm:
                    fail(f"cannot read field declaration {decl!r} in {path}")
                raw_fields.append((current, am.group(1), dm.group(1), dm.group(2).replace(" ", "").replace(",>", ">")))
            rm = re.match(r"impl crate::Resource for (\w+) \{", line)
            if rm:
                body = "\n".join(lines[i : i + 8])
                av = re.search(r'API_VERSION: &\'static str = "([^"]*)"', body).group(1)
                kind = re.search(r'KIND: &\'static str = "([^"]*)"', body).group(1)
                resources.append((av, kind, module, rm.group(1)))
            i += 1

    by_key = {k: v for k, v in messages.items()}

    def target_of(module, inner: str) -> str:
        inner = inner.replace("::prost::alloc::boxed::Box<", "").rstrip(">")
        mod, name = resolve_path(module, inner)
        msg = by_key.get((mod, name))
        if msg is None:
            fail(f"unresolved message type {inner} from {module}")
        return msg.full

    for msg, attr, rust, rty in raw_fields:
        tag = int(re.search(r'tag = "(\d+)"', attr).group(1))
        if attr.startswith("btree_map"):
            kv = re.match(r'btree_map = "string, (\w+)"', attr)
            if not kv:
                fail(f"unsupported map {attr}")
            vkind = kv.group(1)
            target = None
            if vkind == "message":
                inner = re.match(r"::prost::alloc::collections::BTreeMap<::prost::alloc::string::String,(.*)>$", rty)
                target = target_of(msg.module, inner.group(1))
            elif vkind not in ("string", "bytes"):
                fail(f"unsupported map value {vkind}")
            msg.fields.append(PbField(tag, rust, vkind, "map", target))
            continue
        kind = attr.split(",")[0].strip()
        if kind.startswith("bytes"):
            kind = "bytes"
        if "repeated" in attr:
            card = "repeated"
        elif "optional" in attr:
            card = "one"
        else:
            fail(f"field {msg.full}.{rust} is neither optional nor repeated: {attr}")
        target = None
        if kind == "message":
            inner = re.sub(r"^(::core::option::Option|::prost::alloc::vec::Vec)<", "", rty)[:-1]
            target = target_of(msg.module, inner)
        elif kind not in SCALARS:
            fail(f"unsupported prost type {kind}")
        msg.fields.append(PbField(tag, rust, kind, card, target))
    return messages, resources


# ---------------------------------------------------------------- k8s-openapi


def parse_k8s_openapi(src: str):
    """Returns ({(module, lower_name): (name, {norm: json})}, [(api_version, kind)])."""
    base = os.path.join(src, "src/v1_33")
    types = {}
    resources = []
    for path in sorted(glob.glob(os.path.join(base, "**/*.rs"), recursive=True)):
        rel = os.path.relpath(os.path.dirname(path), base)
        module = tuple(rel.split(os.sep)) if rel != "." else ()
        text = open(path, encoding="utf-8").read()
        outer = [
            m
            for m in re.finditer(r"impl<'de> crate::serde::Deserialize<'de> for (\w+) \{", text)
            if m.group(1) != "Field"
        ]
        for n, m in enumerate(outer):
            name = m.group(1)
            end = text.find("_ => Field::Other", m.end())
            nxt = outer[n + 1].start() if n + 1 < len(outer) else len(text)
            if end < 0 or end > nxt:
                continue  # custom Deserialize (IntOrString, Quantity, Time, ...)
            keys = re.findall(r'"([^"]+)" => Field::Key_\w+', text[m.end() : end])
            fields = {}
            for k in keys:
                if norm(k) in fields:
                    fail(f"k8s-openapi {name}: ambiguous JSON names {fields[norm(k)]} and {k}")
                fields[norm(k)] = k
            types[(module, name.lower())] = (name, fields)
        for m in re.finditer(r"impl crate::Resource for (\w+) \{(.*?)\n\}", text, re.S):
            av = re.search(r'API_VERSION: &\'static str = "([^"]*)"', m.group(2)).group(1)
            kind = re.search(r'KIND: &\'static str = "([^"]*)"', m.group(2)).group(1)
            resources.append((av, kind))
    return types, resources


# ---------------------------------------------------------------- Go types


class GoField:
    def __init__(self, name, gotype, json_name, omitempty, embedded, tag):
        self.name = name
        self.gotype = gotype
        self.json_name = json_name
        self.omitempty = omitempty
        self.embedded = embedded
        self.tag = tag


def parse_go(go_src: str):
    """Returns ({(proto_package, lower_struct): (struct_name, {tag: GoField})},
    {proto_package: {named slice type names}})."""
    structs = {}
    named_slices = defaultdict(set)
    for go_root, prefix in PB_TOP.values():
        root = os.path.join(go_src, go_root)
        if not os.path.isdir(root):
            fail(f"missing Go sources {root} (see the header of this script)")
        for path in sorted(glob.glob(os.path.join(root, "**/*.go"), recursive=True)):
            if path.endswith("_test.go") or "/testdata/" in path or "/vendor/" in path:
                continue
            rel = os.path.relpath(os.path.dirname(path), root)
            pkg = prefix + "." + rel.replace(os.sep, ".")
            text = open(path, encoding="utf-8", errors="replace").read()
            for m in re.finditer(r"^type (\w+) \[\]\S+", text, re.M):
                named_slices[pkg].add(m.group(1))
            for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", text, re.S | re.M):
                fields = {}
                for line in m.group(2).split("\n"):
                    fm = re.match(r"^\s*([^/`]+?)\s+`([^`]*)`\s*(//.*)?$", line)
                    if not fm:
                        continue
                    tags = fm.group(2)
                    pm = re.search(r'protobuf:"[a-z0-9]+,(\d+),', tags)
                    if not pm:
                        continue
                    decl = fm.group(1).split()
                    jm = re.search(r'json:"([^"]*)"', tags)
                    jparts = (jm.group(1) if jm else "").split(",")
                    if len(decl) == 1:
                        embedded, name, gotype = True, decl[0].lstrip("*").split(".")[-1], decl[0]
                    elif len(decl) == 2:
                        embedded, name, gotype = False, decl[0], decl[1]
                    else:
                        fail(f"cannot read Go field {line!r} in {path}")
                    tag = int(pm.group(1))
                    fields[tag] = GoField(name, gotype, jparts[0], "omitempty" in jparts[1:], embedded, tag)
                if fields:
                    key = (pkg, m.group(1).lower())
                    structs[key] = (m.group(1), fields)
    return structs, named_slices


# ---------------------------------------------------------------- join


def lower_camel(snake: str, acronyms: dict[str, str]) -> str:
    words = snake.split("_")
    out = [words[0]]
    for w in words[1:]:
        out.append(acronyms.get(w, w[:1].upper() + w[1:]))
    return "".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--go-src", required=True)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()

    pb_src = find_crate("k8s-pb-0.9.0")
    oa_src = find_crate("k8s-openapi-0.29.0")
    pb_msgs, pb_resources = parse_k8s_pb(pb_src)
    oa_types, oa_resources = parse_k8s_openapi(oa_src)
    go_structs, go_named_slices = parse_go(args.go_src)

    # Upstream message names (prost changed their case) from Go, else k8s-openapi, else prost.
    rename = {}
    for msg in pb_msgs.values():
        pkg = msg.full.rsplit(".", 1)[0]
        go = go_structs.get((pkg, msg.rust_name.lower()))
        oa = oa_types.get((msg.module, msg.rust_name.lower()))
        upstream = go[0] if go else (oa[0] if oa else msg.rust_name)
        rename[msg.full] = pkg + "." + upstream
    for msg in pb_msgs.values():
        msg.full = rename[msg.full]
        for f in msg.fields:
            if f.target:
                f.target = rename[f.target]
    msgs = {m.full: m for m in pb_msgs.values()}
    names = sorted(msgs)
    index = {n: i for i, n in enumerate(names)}
    if len(names) > 65535:
        fail("too many messages for u16 indices")

    # Acronym spellings learnt from every (prost name, JSON name) pair k8s-openapi confirms.
    acr_votes: dict[str, Counter] = defaultdict(Counter)
    for msg in msgs.values():
        oa = oa_types.get((msg.module, msg.rust_name.lower()))
        if not oa:
            continue
        for f in msg.fields:
            js = oa[1].get(norm(f.rust))
            if not js or not re.fullmatch(r"[A-Za-z0-9]+", js):
                continue
            words = f.rust.split("_")
            pos = len(words[0])
            for w in words[1:]:
                acr_votes[w][js[pos : pos + len(w)]] += 1
                pos += len(w)
    acronyms = {w: c.most_common(1)[0][0] for w, c in acr_votes.items()}

    # Messages only ever inlined (EphemeralContainerCommon) have no k8s-openapi type of their own:
    # their fields are checked against the type they are flattened into.
    inline_oa = {}
    for msg in msgs.values():
        pkg, short = msg.full.rsplit(".", 1)
        go = go_structs.get((pkg, short.lower()))
        oa = oa_types.get((msg.module, msg.rust_name.lower()))
        for f in msg.fields:
            gf = go[1].get(f.tag) if go else None
            if oa and gf and gf.embedded and gf.json_name == "" and f.target:
                inline_oa.setdefault(f.target, oa)

    stats = Counter()
    out_msgs = []
    for name in names:
        msg = msgs[name]
        pkg = name.rsplit(".", 1)[0]
        short = name.rsplit(".", 1)[1]
        special = SPECIALS.get(name, (None,))[0]
        if name in SPECIALS:
            want = SPECIALS[name][1]
            have = {f.tag: f.kind for f in msg.fields}
            if have != want:
                fail(f"special message {name} has fields {have}, decoder expects {want}")
        go = go_structs.get((pkg, short.lower()))
        oa = oa_types.get((msg.module, msg.rust_name.lower())) or inline_oa.get(name)
        if (
            special is None
            and go_named_slices.get(pkg, set()) & {short}
            and [(f.tag, f.rust, f.card) for f in msg.fields] == [(1, "items", "repeated")]
        ):
            special = "ListWrapper"
        fields = []
        for f in sorted(msg.fields, key=lambda f: f.tag):
            gf = go[1].get(f.tag) if go else None
            # Special messages are rendered by hand; their Go side is not a plain struct.
            inline = bool(gf and gf.embedded and gf.json_name == "" and name not in SPECIALS)
            pointer = bool(gf and gf.gotype.startswith("*"))
            omitempty = bool(gf and gf.omitempty)
            if gf is None:
                stats["no Go field"] += 1
                detail(f"no Go field for {name}.{f.rust}")
                # No Go declaration: presence decides, as for an optional pointer field.
                pointer, omitempty = True, True
            if gf and gf.json_name == "-" and name not in SPECIALS:
                stats["json:- skipped"] += 1
                detail(f"json:\"-\" field {name}.{f.rust} left out")
                continue
            if inline:
                json = ""
                if f.kind != "message" or f.card != "one":
                    fail(f"inline field {name}.{f.rust} is not a singular message")
                if oa:
                    # The inlined struct's JSON names must appear in k8s-openapi's flattened type
                    # (a few may be newer than 1.33, none missing means the inlining is right).
                    tpkg, tname = f.target.rsplit(".", 1)
                    ig = go_structs.get((tpkg, tname.lower()))
                    inner = [ig[1][g.tag].json_name for g in msgs[f.target].fields if ig and g.tag in ig[1]]
                    missing = [j for j in inner if norm(j) not in oa[1]]
                    stats["inline field newer than k8s-openapi v1_33"] += len(missing)
                    if not inner or len(missing) * 2 > len(inner):
                        fail(f"inline {name}.{f.rust}: {missing} missing from k8s-openapi {oa[0]}")
                stats["inline"] += 1
            elif oa and norm(f.rust) not in oa[1]:
                # Newer than Kubernetes 1.33, whose decoder skips it as an unknown field.
                stats["left out: newer than k8s-openapi v1_33"] += 1
                detail(f"left out (newer than 1.33): {name}.{f.rust}")
                continue
            elif oa:
                json = oa[1][norm(f.rust)]
                stats["name from k8s-openapi"] += 1
                if gf and gf.json_name != json:
                    fail(f"{name}.{f.rust}: k8s-openapi says {json}, Go says {gf.json_name}")
            elif gf and gf.json_name:
                json = gf.json_name
                stats["name from Go json tag"] += 1
                conv = lower_camel(f.rust, acronyms)
                stats["conversion agrees with Go" if conv == json else "conversion disagrees with Go"] += 1
                if conv != json:
                    detail(f"conversion gives {conv}, Go says {json} ({name})")
            elif gf and gf.embedded and name not in SPECIALS:
                fail(f"{name}.{f.rust}: embedded Go field with a json name")
            else:
                json = lower_camel(f.rust, acronyms)
                stats["name by conversion"] += 1
                detail(f"name by conversion: {name}.{json}")
            if f.card == "repeated" and gf and not (
                gf.gotype.startswith("[]") or gf.gotype[:1].isupper() or "." in gf.gotype
            ):
                fail(f"{name}.{f.rust}: repeated field with Go type {gf.gotype}")
            if f.card == "repeated" and gf and gf.gotype.startswith("*"):
                fail(f"{name}.{f.rust}: pointer to a slice is not supported")
            flags = []
            if pointer and f.card == "one" and f.kind != "bytes":
                flags.append("POINTER")
            if omitempty:
                flags.append("OMITEMPTY")
            if inline:
                flags.append("INLINE")
            fields.append((f, json, flags))
        out_msgs.append((name, special, fields))

    # Kinds: k8s-openapi (1.33) and k8s-pb Resource impls, their List types, and meta options.
    kinds = {}

    def add_kind(av, kind, full):
        if full in index:
            kinds[(av, kind)] = index[full]

    oa_kinds = set(oa_resources)
    all_kinds = oa_kinds | {(av, k) for av, k, _, _ in pb_resources}
    pkg_of_gv = {}
    for av, kind, module, _rust in pb_resources:
        pkg_of_gv[av] = rename[PB_TOP[module[0]][1] + "." + ".".join(module[1:]) + "." + _rust].rsplit(".", 1)[0]
    group_pkgs = {}
    for av, pkg in pkg_of_gv.items():
        group = av.rsplit("/", 1)[0] if "/" in av else ""
        group_pkgs[group] = pkg.rsplit(".", 1)[0]
    for av, kind in sorted(all_kinds):
        group, version = (av.rsplit("/", 1) if "/" in av else ("", av))
        if group not in group_pkgs:
            if av == "v1":
                continue
            fail(f"no proto package for group {group!r}")
        pkg = group_pkgs[group] + "." + version
        if av == "v1" and kind in ("Status", "APIGroup", "APIGroupList", "APIResourceList", "APIVersions"):
            pkg = "k8s.io.apimachinery.pkg.apis.meta.v1"
        full = pkg + "." + kind
        if full not in index:
            stats["kind without message"] += 1
            print(f"note: kind {av} {kind} has no protobuf message", file=sys.stderr)
            continue
        add_kind(av, kind, full)
        add_kind(av, kind + "List", full + "List")
    for kind in META_OPTION_KINDS:
        add_kind("meta.k8s.io/v1", kind, "k8s.io.apimachinery.pkg.apis.meta.v1." + kind)
    add_kind("meta.k8s.io/v1", "WatchEvent", "k8s.io.apimachinery.pkg.apis.meta.v1.WatchEvent")

    for k, v in sorted(stats.items()):
        print(f"{k}: {v}", file=sys.stderr)

    write(args.out, out_msgs, index, kinds, len(names), sum(len(f) for _, _, f in out_msgs))


KIND_CODE = {
    "string": "S",
    "bool": "B",
    "int32": "I32",
    "int64": "I64",
    "double": "F64",
    "bytes": "BY",
}


def write(path, out_msgs, index, kinds, n_msgs, n_fields):
    w = []
    w.append("//! Generated by `scripts/gen-protobuf-schema.py`; do not edit by hand.")
    w.append("//!")
    w.append("//! Field numbers and proto types come from `k8s-pb` 0.9.0, JSON names from `k8s-openapi` 0.29")
    w.append("//! (`v1_33`), pointer / `omitempty` / inline facts from the upstream Go types (v0.35.0). To")
    w.append("//! regenerate: `python3 scripts/gen-protobuf-schema.py --go-src DIR` (the script's header says")
    w.append("//! what DIR holds). Fields newer than 1.33 are left out, as a 1.33 server skips them. The")
    w.append("//! file is kept as emitted (`mod schema` is `#[rustfmt::skip]`).")
    w.append(f"//! {n_msgs} messages, {n_fields} fields, {len(kinds)} kinds.")
    w.append("")
    w.append("#![allow(clippy::too_many_lines)]")
    w.append("")
    w.append("use super::model::{Card::*, Field, Message, Special, Ty::*};")
    w.append("")
    w.append("const P: u8 = super::model::POINTER;")
    w.append("const O: u8 = super::model::OMITEMPTY;")
    w.append("const PO: u8 = P | O;")
    w.append("const IN: u8 = super::model::INLINE;")
    w.append("")
    w.append("const fn f(tag: u32, json: &'static str, ty: super::model::Ty, card: super::model::Card, flags: u8) -> Field {")
    w.append("    Field { tag, json, ty, card, flags }")
    w.append("}")
    w.append("")
    w.append("/// Every message, sorted by full proto name; `M(i)` refers to `MESSAGES[i]`.")
    w.append("pub(super) static MESSAGES: &[Message] = &[")
    for i, (name, special, fields) in enumerate(out_msgs):
        sp = f"Special::{special}" if special else "Special::None"
        w.append(f'    Message {{ name: "{name}", special: {sp}, fields: &[ // {i}')
        for f, json, flags in fields:
            ty = f"M({index[f.target]})" if f.kind == "message" else KIND_CODE[f.kind]
            card = {"one": "One", "repeated": "Repeated", "map": "Map"}[f.card]
            fl = {
                (): "0",
                ("POINTER",): "P",
                ("OMITEMPTY",): "O",
                ("POINTER", "OMITEMPTY"): "PO",
                ("INLINE",): "IN",
                ("OMITEMPTY", "INLINE"): "IN | O",
                ("POINTER", "INLINE"): "IN | P",
                ("POINTER", "OMITEMPTY", "INLINE"): "IN | PO",
            }[tuple(flags)]
            w.append(f'        f({f.tag}, "{json}", {ty}, {card}, {fl}),')
        w.append("    ]},")
    w.append("];")
    w.append("")
    w.append("/// (apiVersion, kind) of every top-level type, sorted, with its index in [`MESSAGES`].")
    w.append("pub(super) static KINDS: &[(&str, &str, u16)] = &[")
    for (av, kind), i in sorted(kinds.items()):
        w.append(f'    ("{av}", "{kind}", {i}),')
    w.append("];")
    w.append("")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(w))


if __name__ == "__main__":
    main()
