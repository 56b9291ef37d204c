//! The status vocabulary in the docs is the code's: the status reference in docs/api.md lists exactly the conditions,
//! reasons, phases, Event reasons and error categories the code declares (one list each), the table of built-in
//! profiles in docs/configuration.md is the catalogue, and the generated CRD's descriptions (what `kubectl explain`
//! prints) name every condition and every built-in harness.

mod support;

use std::collections::BTreeSet;

use worksession::api::{Phase, PromptPhase, Via};
use worksession::core::{
    ActivityReason, ConditionType, ConfinedReason, DiscoveryReason, EventReason, NodeLostReason, PlacedReason,
    ReadyReason, Reason, ResumeReason, WorkspaceReason,
};
use worksession::words::ErrorCategory;

/// The tables of docs/api.md's "Status reference" section (up to the next heading), by the header of their first
/// column: each row's cells, with the backticks taken off.
fn reference_tables() -> Vec<(String, Vec<Vec<String>>)> {
    let doc = std::fs::read_to_string(support::repo_root().join("docs/api.md")).unwrap();
    let start = doc.find("\n## Status reference\n").expect("docs/api.md has a status reference");
    let section = &doc[start + 1..];
    let end = section[3..].find("\n#").map_or(section.len(), |i| i + 3);
    let mut tables: Vec<(String, Vec<Vec<String>>)> = Vec::new();
    let mut in_table = false;
    for line in section[..end].lines() {
        let Some(row) = line.strip_prefix('|') else {
            in_table = false;
            continue;
        };
        let cells: Vec<String> = row.split('|').map(|c| c.trim().trim_matches('`').to_string()).collect();
        if cells[0].starts_with("---") {
            continue;
        }
        if !in_table {
            tables.push((cells[0].clone(), Vec::new()));
            in_table = true;
        } else {
            tables.last_mut().unwrap().1.push(cells);
        }
    }
    tables
}

fn column(tables: &[(String, Vec<Vec<String>>)], header: &str, at: usize) -> BTreeSet<String> {
    let (_, rows) = tables.iter().find(|(h, _)| h == header).unwrap_or_else(|| panic!("no table {header:?}"));
    rows.iter().map(|r| r[at].clone()).collect()
}

fn words(all: impl IntoIterator<Item = &'static str>) -> BTreeSet<String> {
    all.into_iter().map(str::to_string).collect()
}

fn reasons<R: Reason>() -> BTreeSet<String> {
    R::all().iter().map(|r| format!("{} {}", R::CONDITION, r.name())).collect()
}

#[test]
fn the_status_reference_lists_every_word_of_the_status_and_no_other() {
    let tables = reference_tables();
    let (_, rows) = tables.iter().find(|(h, _)| h == "condition").expect("a table of conditions");
    let listed: BTreeSet<String> = rows.iter().map(|r| format!("{} {}", r[0], r[2])).collect();
    let mut declared = BTreeSet::new();
    declared.extend(reasons::<ReadyReason>());
    declared.extend(reasons::<ResumeReason>());
    declared.extend(reasons::<DiscoveryReason>());
    declared.extend(reasons::<ConfinedReason>());
    declared.extend(reasons::<WorkspaceReason>());
    declared.extend(reasons::<ActivityReason>());
    declared.extend(reasons::<PlacedReason>());
    declared.extend(reasons::<NodeLostReason>());
    assert_eq!(listed, declared, "docs/api.md's conditions and reasons");
    let types: BTreeSet<String> = rows.iter().map(|r| r[0].clone()).collect();
    assert_eq!(types, words(ConditionType::ALL.iter().map(|c| c.as_str())), "every condition has its reasons");

    let cases = [
        ("phase", words(Phase::ALL.iter().map(|w| w.as_str()))),
        ("WorkEvent phase", words(PromptPhase::ALL.iter().map(|w| w.as_str()))),
        ("via", words(Via::ALL.iter().map(|w| w.as_str()))),
        ("Event reason", words(EventReason::ALL.iter().map(|w| w.as_str()))),
        ("error category", words(ErrorCategory::ALL.iter().map(|w| w.as_str()))),
    ];
    for (header, declared) in cases {
        assert_eq!(column(&tables, header, 0), declared, "docs/api.md's table of {header}s");
    }
}

#[test]
fn the_crd_descriptions_name_every_condition_and_built_in_harness() {
    let crds = worksession::api::crds();
    let session = crds.iter().find(|c| c.spec.names.kind == "WorkSession").unwrap();
    let session = serde_json::to_value(session).unwrap();
    let schema = &session["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    let conditions = schema["status"]["properties"]["conditions"]["description"].as_str().unwrap();
    for c in ConditionType::ALL {
        assert!(conditions.contains(&format!("`{c}`")), "status.conditions does not name {c}: {conditions}");
    }
    let harness = schema["spec"]["properties"]["harness"]["description"].as_str().unwrap();
    for name in worksession::harness::builtin().keys() {
        assert!(harness.contains(&format!("`{name}`")), "spec.harness does not name {name}: {harness}");
    }
}

/// The rows of the first table under the heading `heading` of the file `doc` (a path from the repository's root), the
/// backticks taken off each cell.
fn table_under(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(support::repo_root().join(doc)).unwrap();
    let start = text.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("{doc} has {heading}"));
    let rows = text[start..].lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|'));
    let cells = |l: &str| l[1..].split('|').map(|c| c.trim().trim_matches('`').to_string()).collect::<Vec<_>>();
    rows.skip(2).map(cells).collect()
}

/// An argv template as docs/configuration.md writes it: `{sessionId}` is `<id>`, `{prompt}` is `<prompt>`,
/// `{extraArgs}` left out.
fn written(words: &[String]) -> String {
    let word = |w: &String| w.replace("{sessionId}", "<id>").replace("{prompt}", "<prompt>");
    words.iter().filter(|w| *w != "{extraArgs}").map(word).collect::<Vec<_>>().join(" ")
}

#[test]
fn the_table_of_built_in_profiles_is_the_catalogue() {
    let rows = table_under("docs/configuration.md", "## Built-in harness profiles");
    let catalogue = worksession::harness::builtin();
    let listed: BTreeSet<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(listed, catalogue.keys().map(String::as_str).collect(), "docs/configuration.md's profiles");
    for row in &rows {
        let profile = &catalogue[&row[0]];
        let Some(interactive) = &profile.interactive else {
            assert!(row[1].contains("cannot be hosted"), "{}: {}", row[0], row[1]);
            continue;
        };
        assert_eq!(row[1], format!("{} {}", profile.binary, written(interactive)), "{}'s start", row[0]);
        // Its resume as far as the words that tell it from a start (what follows `{extraArgs}` is the start's).
        let resume = profile.resume.as_deref().unwrap_or_default();
        let head: Vec<String> = resume.iter().take_while(|w| *w != "{extraArgs}").cloned().collect();
        assert_eq!(row[2], written(&head), "{}'s resume", row[0]);
    }
}
