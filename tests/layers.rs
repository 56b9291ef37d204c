//! The layers, kept by a test rather than by discipline: no two modules of `src/` use each other,
//! directly or around a circle. A module is a file (`src/tmux.rs` is `tmux`, `src/agent/reconcile.rs` is
//! `agent::reconcile`, a `mod.rs` its directory); its uses are every `crate::...` and `super::...` path outside its
//! `#[cfg(test)]` tests. A child naming its parent (`super::Thing` from `agent/evidence.rs` into `agent/mod.rs`) is
//! how Rust modules are built and is not counted.

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
/// The core is one layer, whatever files it is split into: its parts are one decision's (`impl Decision` by concept).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    if parts.first().is_some_and(|p| p == "core") {
        parts.truncate(1);
    }
    parts.join("::")
}

/// Which modules each module of `src/` uses (the core counted as one).
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let modules: BTreeSet<String> = all.iter().map(|f| module_of(&src, f)).collect();
    // The longest module that is a prefix of a path: `crate::agent::reconcile::Failpoint` is `agent::reconcile`.
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len()).rev().map(|n| parts[..n].join("::")).find(|m| modules.contains(m))
    };
    // `worksession::` is how `main.rs` names the library.
    let path = Regex::new(r"\b(crate|super|worksession)((?:::[a-z_][a-z0-9_]*)+)").unwrap();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &all {
        let module = module_of(&src, file);
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        // Code only: a comment may name any module.
        let code: String = code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
        let parent = module.rsplit_once("::").map_or(String::new(), |(p, _)| p.to_string());
        // In a `mod.rs`, `super` is the directory's parent; in a file module, its directory.
        let base = |kind: &str| match kind {
            "crate" | "worksession" => String::new(),
            _ if file.ends_with("mod.rs") => module.rsplit_once("::").map_or(String::new(), |(p, _)| p.to_string()),
            _ => parent.clone(),
        };
        for caps in path.captures_iter(&code) {
            let tail = caps[2].trim_start_matches("::");
            let base = base(&caps[1]);
            let full = if base.is_empty() { tail.to_string() } else { format!("{base}::{tail}") };
            let Some(target) = resolve(&full).map(|t| if t.starts_with("core::") { "core".to_string() } else { t })
            else {
                continue;
            };
            let ancestor = module == target || module.starts_with(&format!("{target}::")) || target.is_empty();
            if !ancestor {
                uses.entry(module.clone()).or_default().insert(target);
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
