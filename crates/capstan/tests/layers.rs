//! The layering rule of ARCHITECTURE.md, checked: inside every crate, the top-level modules
//! (a file or folder beside `lib.rs`/`main.rs`) import one another without cycles, so that each
//! crate reads as layers, each depending only on the ones below it.
//!
//! The check reads the sources as text: every `crate::<module>` path (also inside
//! `use crate::{a, b}` groups) outside comments and test code names an edge from the module
//! that holds it to `<module>`. Test code (files named `tests.rs` or `*_tests.rs`, and what
//! follows a top-level `#[cfg(test)]`) may reach anywhere.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `path` (or `path` itself), skipping test files.
fn sources(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for entry in entries {
            sources(&entry, out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        let name = path.file_name().unwrap().to_string_lossy();
        if name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(path.to_owned());
        }
    }
}

/// The code of a file without comments and without what follows a top-level `#[cfg(test)]`.
fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The top-level modules a piece of code names through `crate::`.
fn imports(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        // `capstan_api::...` or `$crate::` are other crates' paths.
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c}`: the first segment of each entry (one level of nesting).
            let mut depth = 0;
            let mut entry_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => entry_start = true,
                    c if entry_start && !c.is_whitespace() => {
                        let name = ident(&group[i..]);
                        if !name.is_empty() {
                            found.insert(name);
                        }
                        entry_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// The strongly connected components with more than one module (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, node: &'a str) {
        let n = s.index.len();
        s.index.insert(node, n);
        s.low.insert(node, n);
        s.stack.push(node);
        s.on_stack.insert(node);
        for next in s.graph.get(node).into_iter().flatten() {
            let next = next.as_str();
            if !s.index.contains_key(next) {
                visit(s, next);
                let low = s.low[node].min(s.low[next]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(next) {
                let low = s.low[node].min(s.index[next]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut component = Vec::new();
            while let Some(member) = s.stack.pop() {
                s.on_stack.remove(member);
                component.push(member.to_owned());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

/// The import graph between the top-level modules of the crate whose sources are in `src`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let is_module = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
        if !is_module || stem == "lib" || stem == "main" || stem.ends_with("_tests") {
            continue;
        }
        modules.insert(stem, path);
    }
    let mut graph = BTreeMap::new();
    for (module, path) in &modules {
        let mut files = Vec::new();
        sources(path, &mut files);
        let mut edges = BTreeSet::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for target in imports(&code(&text)) {
                if &target != module && modules.contains_key(&target) {
                    edges.insert(target);
                }
            }
        }
        graph.insert(module.clone(), edges);
    }
    graph
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(crates)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for krate in entries {
        let src = krate.join("src");
        if !src.is_dir() {
            continue;
        }
        checked += 1;
        for cycle in cycles(&module_graph(&src)) {
            failures.push(format!("{}: {}", krate.display(), cycle.join(" <-> ")));
        }
    }
    assert!(
        checked >= 10,
        "only {checked} crates found under {}",
        crates.display()
    );
    assert!(
        failures.is_empty(),
        "import cycles between top-level modules:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_check_sees_paths_groups_and_cycles() {
    let code = code(
        "use crate::a::x;\nuse crate::{b, c::{d, e}};\n// crate::commented\nfn f() { my_crate::no(); $crate::no(); crate::g(); }\n#[cfg(test)]\nmod tests { use crate::h; }\n",
    );
    let found: Vec<String> = imports(&code).into_iter().collect();
    assert_eq!(found, ["a", "b", "c", "g"]);
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(cycles(&graph), vec![vec!["a", "b", "c"]]);
}
