//! The layers, kept by a test rather than by discipline: no two modules of `src/` use each other,
//! directly or around a circle. A module is a file (`src/node/tmux.rs` is `node::tmux`, `src/agent/reconcile.rs` is
//! `agent::reconcile`, a `mod.rs` its directory); its uses are every `crate::...` and `super::...` path outside its
//! `#[cfg(test)]` tests, each followed through the `pub use` re-exports to the module that defines what it names (a
//! child's `super::Reconciler` uses `agent::reconcile`, not its parent). A child naming what its parent defines is how
//! Rust modules are built and is not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            // A module's own tests (`src/core/tests/`) may use anything they test.
            if path.file_name().is_some_and(|n| n != "tests") {
                files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/agent/reconcile.rs` is `agent::reconcile`; `src/agent/mod.rs` is `agent`; `src/lib.rs` and `main.rs` are ``.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts.join("::")
}

/// The layer a module is counted in: itself, but the core is one layer whatever files it is split into (its parts
/// are one decision's, `impl Decision` by concept).
fn layer(module: &str) -> String {
    if module == "core" || module.starts_with("core::") { "core".to_string() } else { module.to_string() }
}

/// A file's code, without its `#[cfg(test)]` tests and its comments (a comment may name any module).
fn code_of(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
    code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// Where a path written in `module` starts: `crate::` (and `worksession::`, how `main.rs` names the library) at the
/// root; `super::` at the module's parent (a `mod.rs` is its directory's module); any other (a `pub use child::Thing`
/// of a `mod.rs`) in the module itself.
fn base_of(module: &str, kind: &str) -> String {
    match kind {
        "crate" | "worksession" => String::new(),
        "super" => module.rsplit_once("::").map_or(String::new(), |(p, _)| p.to_string()),
        _ => module.to_string(),
    }
}

fn joined(base: &str, tail: &str) -> String {
    if base.is_empty() { tail.to_string() } else { format!("{base}::{tail}") }
}

/// Every name a module re-exports (`agent::Reconciler`), and the path it names there (`agent::reconcile::Reconciler`).
fn reexports(src: &Path, all: &[PathBuf]) -> BTreeMap<String, String> {
    let one = Regex::new(r"pub(?:\([a-z]+\))? use ((?:[a-z_][a-z0-9_]*::)+)(?:\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*(?: as [A-Za-z_][A-Za-z0-9_]*)?))")
        .unwrap();
    let mut out = BTreeMap::new();
    for file in all {
        let module = module_of(src, file);
        let code = code_of(file);
        for caps in one.captures_iter(&code) {
            let path = caps[1].trim_end_matches("::");
            let (kind, rest) = path.split_once("::").unwrap_or((path, ""));
            let from = match kind {
                "crate" | "super" | "worksession" => joined(&base_of(&module, kind), rest),
                _ => joined(&module, path),
            };
            let names = caps.get(2).or(caps.get(3)).unwrap().as_str();
            for name in names.split(',').map(str::trim).filter(|n| !n.is_empty() && *n != "*") {
                let (name, alias) = name.split_once(" as ").unwrap_or((name, name));
                out.insert(joined(&module, alias.trim()), joined(&from, name.trim()));
            }
        }
    }
    out
}

/// Which modules each module of `src/` uses (the core counted as one).
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let modules: BTreeSet<String> = all.iter().map(|f| module_of(&src, f)).collect();
    let reexported = reexports(&src, &all);
    // Through the re-exports (`agent::Reconciler` is `agent::reconcile::Reconciler`), to the longest module that is
    // a prefix of the path: `agent::reconcile::Failpoint` is `agent::reconcile`.
    let resolve = |path: &str| -> Option<String> {
        let mut path = path.to_string();
        for _ in 0..8 {
            let parts: Vec<&str> = path.split("::").collect();
            let through = (1..=parts.len()).rev().find_map(|n| {
                let to = reexported.get(&parts[..n].join("::"))?;
                Some(parts[n..].iter().fold(to.clone(), |p, rest| format!("{p}::{rest}")))
            });
            match through {
                Some(next) if next != path => path = next,
                _ => break,
            }
        }
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len()).rev().map(|n| parts[..n].join("::")).find(|m| modules.contains(m))
    };
    let path = Regex::new(r"\b(crate|super|worksession)((?:::[A-Za-z_][A-Za-z0-9_]*)+)").unwrap();
    let group = Regex::new(r"\b(crate|super|worksession)((?:::[a-z_][a-z0-9_]*)*)::\{([^}]*)\}").unwrap();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &all {
        let module = module_of(&src, file);
        let code = code_of(file);
        // `use super::{evidence, Reconciler}`: each name of a group is a path of its own.
        let mut paths: Vec<(String, String)> = path.captures_iter(&code).map(|c| (c[1].into(), c[2].into())).collect();
        for caps in group.captures_iter(&code) {
            for name in caps[3].split(',').map(|n| n.split(" as ").next().unwrap().trim()) {
                let name = name.split("::").next().unwrap_or_default();
                if !name.is_empty() && name != "self" {
                    paths.push((caps[1].into(), format!("{}::{name}", &caps[2])));
                }
            }
        }
        for (kind, tail) in paths {
            let full = joined(&base_of(&module, &kind), tail.trim_start_matches("::"));
            let Some(target) = resolve(&full).map(|t| layer(&t)) else { continue };
            let module = layer(&module);
            let ancestor = module == target || module.starts_with(&format!("{target}::")) || target.is_empty();
            if !ancestor {
                uses.entry(module).or_default().insert(target);
            }
        }
    }
    uses
}

#[test]
fn no_two_modules_use_each_other() {
    let uses = uses();
    // A circle: a path from a module back to itself.
    let mut circles = Vec::new();
    for start in uses.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, trail)) = stack.pop() {
            for next in uses.get(&at).into_iter().flatten() {
                if next == start {
                    circles.push(trail.join(" -> ") + " -> " + start);
                } else if seen.insert(next.clone()) {
                    let mut longer = trail.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    assert!(circles.is_empty(), "modules that use each other:\n{}", circles.join("\n"));
}

/// The core decides from values: it uses the API's types, the config and the harness profiles it decides with, and
/// the words of the status, never an edge (tmux, git, the store, the rooms, the agent) or a runtime.
#[test]
fn the_core_uses_no_edge() {
    let uses = uses();
    let core: BTreeSet<&str> = uses.get("core").into_iter().flatten().map(String::as_str).collect();
    // The vocabulary: these modules and their parts (`config::rooms`, `harness::hooks`).
    let vocabulary = ["api", "config", "harness", "words"];
    let allowed = |m: &str| vocabulary.iter().any(|v| m == *v || m.starts_with(&format!("{v}::")));
    let outside: Vec<&&str> = core.iter().filter(|m| !allowed(m)).collect();
    assert!(outside.is_empty(), "the core uses {outside:?}");
    // Nor through them: what the core's vocabulary uses is vocabulary too (or the core).
    for (module, used) in uses.iter().filter(|(m, _)| allowed(m)) {
        let outside: Vec<&String> = used.iter().filter(|m| !allowed(m) && *m != "core").collect();
        assert!(outside.is_empty(), "{module}, which the core uses, uses {outside:?}");
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let mut all = Vec::new();
    files(&src, &mut all);
    for file in all {
        let text = std::fs::read_to_string(&file).unwrap();
        for runtime in ["tokio", "kube::", "std::fs", "std::process", "std::net"] {
            assert!(!text.contains(runtime), "{} names {runtime}", file.display());
        }
    }
}

/// Only `main.rs` chooses a backend: everything else reaches storage through the `Store`, `Sink` and `Listing` traits.
#[test]
fn only_main_names_a_backend() {
    let backends = ["store::kube", "store::local"];
    let naming: BTreeSet<String> = uses()
        .into_iter()
        .filter(|(module, used)| !module.starts_with("store") && used.iter().any(|u| backends.contains(&u.as_str())))
        .map(|(module, _)| module)
        .collect();
    assert_eq!(naming, BTreeSet::from([String::new()]), "`` is main.rs (and lib.rs)");
}

/// The tree's top level, by layer, lowest first: each layer uses only the layers below it (and itself), and every
/// top-level module is in one.
const LAYERS: [(&str, &[&str]); 4] = [
    ("the pure parts", &["api", "config", "core", "harness", "words"]),
    ("beside them: storage, GitHub's API, telemetry, signals", &["github", "signal", "store", "telemetry"]),
    ("the node's edges", &["node"]),
    ("the processes", &["agent", "bridge", "cli", "console", "controller"]),
];

fn layer_index(module: &str) -> Option<usize> {
    let top = module.split("::").next().unwrap_or_default();
    LAYERS.iter().position(|(_, modules)| modules.contains(&top))
}

#[test]
fn the_tree_shows_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let tops: BTreeSet<String> = all
        .iter()
        .map(|f| module_of(&src, f))
        .filter(|m| !m.is_empty())
        .map(|m| m.split("::").next().unwrap().into())
        .collect();
    let unplaced: Vec<&String> = tops.iter().filter(|m| layer_index(m).is_none()).collect();
    assert!(unplaced.is_empty(), "top-level modules in no layer: {unplaced:?}");
    let mut upward = Vec::new();
    for (module, used) in uses() {
        let Some(from) = layer_index(&module) else { continue }; // lib.rs and main.rs
        for target in used.iter().filter(|t| layer_index(t).is_some_and(|to| to > from)) {
            upward.push(format!(
                "{module} ({}) uses {target} ({})",
                LAYERS[from].0,
                LAYERS[layer_index(target).unwrap()].0
            ));
        }
    }
    assert!(upward.is_empty(), "uses of a higher layer:\n{}", upward.join("\n"));
}
