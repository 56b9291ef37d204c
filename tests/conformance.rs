//! The conformance table: each installed harness CLI at its pinned version through the same contract, against the
//! scripted model, through the agent with the built-in profile as it ships (only its binary wrapped to set the CLI's
//! environment). Each test measures one CLI: its version; whether the id it runs is the one it was given, or one the
//! agent discovers; a real turn (how its delivery is confirmed, which hooks fire, what `Activity` says at its end);
//! what the model gets for prompts starting with `/`, `!`, `#` and `@`; whether a killed harness's next prompt lands
//! in the same conversation; what a person's clear and compaction typed into it do to the recorded id and the next
//! prompt; and what an unknown id does (the `Resumed` row, how long it took, the CLI's words).
//!
//! Each checks what it measured against the profile's assumptions (so a new CLI version that changes behaviour fails
//! here, not in a user's night) and writes its row to `target/conformance/<cli>.json`; `scripts/conformance` runs
//! them and writes `docs/conformance.md`.

mod scenarios;
mod standin;
mod support;
mod world;

use std::path::PathBuf;
use std::time::Instant;

use std::time::Duration;

use serde_json::json;
use support::model::{Model, Reply};
use worksession::api::{Phase, PromptPhase, Via};
use world::{World, condition, recorded_id};

/// One CLI's measured row.
#[derive(Debug, Default, serde::Serialize)]
struct Row {
    cli: String,
    version: String,
    id_at_start: String,
    turn: String,
    hooks: String,
    leading: String,
    resume_after_kill: String,
    unknown_id: String,
    measured: String,
    command_line: String,
    during_turn: String,
    failed_turn: String,
    clear: String,
    compaction: String,
    unknown_exit: String,
}

/// How long a prompt may take here to be known delivered or failed: two sends, each waiting out the 60 s confirm
/// deadline, and the boot before them.
const SETTLE: Duration = Duration::from_secs(150);

/// The prompts whose first character a CLI may take as its own command, and what the profile sends for each.
const LEADING: [&str; 4] = ["/conformance-slash", "!conformance-bang", "#conformance-hash", "@conformance-at"];

async fn world_for(name: &'static str, model: &Model) -> World {
    // The real CLIs' deadline for a delivery (tests/claude.rs), but for Copilot, whose prompts are never confirmed
    // offline: the stand-in's 15 s, so its failure is measured within a test's wait.
    let confirm = if name == "copilot" { 15 } else { 60 };
    // Gemini CLI skips a settings file under a folder others can write (`/tmp`): every world under the user's cache.
    let cache = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| support::repo_root().join("target"));
    let tmux = standin::TmuxServer::new_in(&cache.join(".cache/worksession-tests"));
    World::with_tmux(tmux, |tmux, yaml| {
        yaml.replace("confirmTimeoutSeconds: 15", &format!("confirmTimeoutSeconds: {confirm}"))
            + &support::clis::scripted_profile(name, &tmux.state(), &tmux.workdir(), model)
    })
    .await
}

fn version_of(name: &str) -> String {
    let bin = if name == "claude" { support::claude::bin() } else { support::clis::bin(name) };
    let out = std::process::Command::new(bin).arg("--version").env("HOME", "/nonexistent").output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or_default().trim().to_string()
}

/// The distinct hooks the session's hook file holds, in the order first seen.
fn hooks_seen(w: &World, session: &str) -> Vec<String> {
    let file = worksession::node::hook::file_of(&w.tmux.state(), &format!("{}/{session}", w.ns.name));
    let mut seen: Vec<String> = Vec::new();
    for line in std::fs::read_to_string(file).unwrap_or_default().lines() {
        let hook =
            serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| v["hook"].as_str().map(String::from));
        if let Some(hook) = hook.filter(|h| !seen.contains(h)) {
            seen.push(hook);
        }
    }
    seen
}

/// The session ids the CLI's own hooks named (`SessionStart` and others carry one).
fn ids_in_hooks(w: &World, session: &str) -> Vec<String> {
    let file = worksession::node::hook::file_of(&w.tmux.state(), &format!("{}/{session}", w.ns.name));
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["data"]["session_id"].as_str().or(v["data"]["sessionID"].as_str()).map(String::from))
        .collect()
}

async fn conform(name: &'static str) {
    let profile = worksession::harness::builtin()[name].clone();
    // Where its hooks report each turn (its prompt taken, its end), a turn is over when they say so.
    let turns = profile.hooks.is_some();
    let model = Model::start();
    let w = world_for(name, &model).await;
    let mut row = Row { cli: name.into(), version: version_of(name), ..Row::default() };
    let today = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    row.measured = today;

    // A real turn: the initial prompt, confirmed by the harness's own record, and the turn's end.
    let first = "conformance: the first prompt";
    w.create_session("c", json!({"harness": name, "initialPrompt": first})).await;
    let ws = w
        .await_session("c", "the initial prompt known delivered or failed", |ws| {
            let phase = ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase);
            matches!(phase, Some(PromptPhase::Delivered | PromptPhase::Failed))
        })
        .await;
    let initial = ws.status.as_ref().and_then(|s| s.initial_prompt.clone()).unwrap();
    if initial.phase == Some(PromptPhase::Failed) {
        // Copilot CLI without an account takes no prompt (it asks for /login): nothing more is measurable offline.
        row.turn = format!("none offline: the prompt failed ({})", initial.message.unwrap_or_default());
        row.hooks = hooks_seen(&w, "c").join(", ");
        assert!(!model.prompts().iter().any(|p| p.contains(first)), "{name}: failed, yet the model got it");
    } else {
        let ws = w
            .await_session("c", "the turn over", |ws| {
                let turn_over = !turns || condition(ws, "Activity").is_some_and(|c| c.1 == "Idle");
                turn_over && model.prompts().iter().any(|p| p.contains(first))
            })
            .await;
        let activity = condition(&ws, "Activity").map_or("not reported".into(), |c| c.1);
        row.turn = format!("the model got the prompt; Activity {activity} at the turn's end");
        row.hooks = hooks_seen(&w, "c").join(", ");
        let id = recorded_id(&ws);
        let given = profile.interactive.as_ref().is_some_and(|a| a.iter().any(|w| w.contains("{sessionId}")));
        let named = ids_in_hooks(&w, "c");
        row.id_at_start = if given {
            assert!(named.is_empty() || named.contains(&id), "{name}: its hooks name {named:?}, not the given {id}");
            format!("given (`{}`), and the one it runs", profile.interactive.as_ref().unwrap().join(" "))
        } else {
            let discover = profile.discover.as_ref().map_or("-", |d| d.path.as_deref().unwrap_or("its log or hooks"));
            format!("discovered ({discover})")
        };

        // Prompts that lead with a character a CLI may take as its own command: what the model got for each.
        let mut leading = Vec::new();
        for (i, prompt) in LEADING.iter().enumerate() {
            let event = format!("lead-{i}");
            w.send("c", &event, prompt).await;
            w.await_event(&event, PromptPhase::Delivered).await;
            let got = support::eventually(&format!("{name}: the model got {prompt:?}"), || async {
                model.prompts().into_iter().find(|p| p.contains(&prompt[1..]))
            })
            .await;
            let literal = profile.command_prefixes.iter().any(|c| prompt.starts_with(c.as_str()));
            let expected =
                if literal { format!("{}{prompt}", worksession::harness::LITERAL_PREFIX) } else { prompt.to_string() };
            // Whole, on a line of its own (Copilot CLI puts the time on lines before it).
            let got = got.trim().rsplit('\n').next().unwrap_or_default().to_string();
            assert_eq!(got, expected, "{name}: {prompt:?} sent as {expected:?} is taken as text, whole");
            leading.push(format!("`{}` → `{}`", prompt.chars().next().unwrap(), got.replace(&prompt[1..], "…")));
            w.await_session("c", "the turn over", |ws| {
                !turns || condition(ws, "Activity").is_some_and(|c| c.1 == "Idle")
            })
            .await;
        }
        row.leading = leading.join("; ");
        row.command_line = command_line(&w, &model, name).await;
        row.during_turn = during_a_turn(&w, &model, name, turns).await;
        row.failed_turn = behind_a_failed_turn(&w, &model, name, turns).await;

        // A killed harness: the next prompt resumes the conversation it was in (the one recorded now: a harness may
        // have moved to another since its first turn, and said so).
        let ws = w
            .await_session("c", "a recorded id", |ws| {
                ws.status.as_ref().and_then(|s| s.harness_session_id.as_ref()).is_some_and(|id| !id.is_empty())
            })
            .await;
        let now = recorded_id(&ws);
        let moved = if now == id { String::new() } else { format!(" (its id moved from {id} to {now} on the way)") };
        let id = now;
        w.tmux.kill_pane(&w.tmux_session("c")).await;
        w.send("c", "after-kill", "conformance: after the kill").await;
        let st = w.await_event("after-kill", PromptPhase::Delivered).await.status.unwrap();
        // On the resume's command line, or pasted once it runs where the resume takes no prompt (opencode).
        let via = if profile.takes_prompt(worksession::harness::Mode::Resume) { Via::Resumed } else { Via::Pasted };
        assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(via), Some(id.as_str())), "{name}");
        let request = support::eventually(&format!("{name}: the model asked after the kill"), || async {
            model.requests().into_iter().find(|r| r.prompt.as_deref().is_some_and(|p| p.contains("after the kill")))
        })
        .await;
        assert!(request.body.to_string().contains(first), "{name}: the resumed conversation holds the first prompt");
        row.resume_after_kill =
            format!("resumed: the model got the next prompt with the conversation before it{moved}");
        row.clear = a_persons_clear(&w, &model, name, turns, first).await;
        row.compaction = a_persons_compaction(&w, &model, name, turns).await;
    }

    // An unknown id: the agent's resume table, with the CLI's own words where it ran.
    let unknown = uuid::Uuid::new_v4().to_string();
    let started = Instant::now();
    let spec = json!({"harness": name, "harnessSessionId": unknown, "initialPrompt": "conformance: an unknown id"});
    w.create_session("u", spec).await;
    let ws = w
        .await_session("u", "Resumed=False and Running", |ws| {
            condition(ws, "Resumed").is_some_and(|c| c.0 == "False") && world::phase_of(ws) == Some(Phase::Running)
        })
        .await;
    let (_, reason, message) = condition(&ws, "Resumed").unwrap();
    let ran = matches!(reason.as_str(), "PaneDied" | "PaneDiedAfterProbe");
    assert!(ran || reason == "ConversationNotFound", "{name}: {reason}: {message}");
    if ran {
        assert!(profile.resume_failed(&message), "{name}: resumeFailedPattern does not match: {message}");
    }
    // The CLI's own words where it ran (from where its profile's pattern matches), else the agent's.
    let from = profile.resume_failed_pattern.as_ref().and_then(|p| p.find(&message)).map_or(0, |m| m.start());
    let words: String = message[from..].split_whitespace().collect::<Vec<_>>().join(" ").chars().take(120).collect();
    row.unknown_id = format!("`{reason}` after {} s: {words}", started.elapsed().as_secs());
    // A fresh conversation (a harness that shows its id later has none recorded yet).
    let recorded = ws.status.as_ref().and_then(|s| s.harness_session_id.clone());
    assert_ne!(recorded.as_deref(), Some(unknown.as_str()), "{name}: a fresh conversation");

    row.unknown_exit = unknown_id_run_directly(&w, name).await;

    let dir = support::repo_root().join("target/conformance");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.json")), serde_json::to_string_pretty(&row).unwrap()).unwrap();
}

/// The WorkEvent `name` once it is known delivered or failed.
async fn settled(w: &World, name: &str) -> worksession::api::WorkEventStatus {
    settled_within(w, name, support::WAIT).await
}

/// The same, waiting at most `limit`.
async fn settled_within(w: &World, name: &str, limit: Duration) -> worksession::api::WorkEventStatus {
    let api = w.events();
    support::eventually_within(&format!("{name} Delivered or Failed"), limit, || async {
        let status = api.get(name).await.ok()?.status?;
        matches!(status.phase, Some(PromptPhase::Delivered | PromptPhase::Failed)).then_some(status)
    })
    .await
}

/// How many of the model's requests carry `text` as their prompt.
fn asked(model: &Model, text: &str) -> usize {
    model.prompts().iter().filter(|p| p.contains(text)).count()
}

/// Awaits the session's turn being over, where its hooks say so.
async fn turn_over(w: &World, turns: bool) {
    if turns {
        w.await_session("c", "the turn over", |ws| condition(ws, "Activity").is_some_and(|c| c.1 != "Working")).await;
    }
}

/// Prompts leading with a character a CLI may take as its own command, each the initial prompt of a session of its
/// own (on the command line): what the model got for each. The same rules as for a paste: taken as text, whole.
async fn command_line(w: &World, model: &Model, name: &str) -> String {
    let profile = &worksession::harness::builtin()[name];
    let mut cells = Vec::new();
    for (i, lead) in LEADING.iter().enumerate() {
        let prompt = format!("{lead} on the command line");
        w.create_session(&format!("l{i}"), json!({"harness": name, "initialPrompt": prompt})).await;
    }
    let api = w.sessions();
    for (i, lead) in LEADING.iter().enumerate() {
        // The harness's own word first (four CLIs booting at once on a loaded machine take their time): its
        // initial prompt known delivered, or failed and why.
        let session = format!("l{i}");
        let initial = support::eventually_within(&format!("{session}: its initial prompt settled"), SETTLE, || async {
            let prompt = api.get(&session).await.ok()?.status?.initial_prompt?;
            matches!(prompt.phase, Some(PromptPhase::Delivered | PromptPhase::Failed)).then_some(prompt)
        })
        .await;
        assert_eq!(initial.phase, Some(PromptPhase::Delivered), "{name}: {lead:?} on the command line: {initial:?}");
        let tail = format!("{} on the command line", &lead[1..]);
        let got = support::eventually(&format!("{name}: the model got {lead:?} from the command line"), || async {
            // The prompt itself, its words last: not a request that quotes it (Gemini CLI asks its model for a
            // summary of the prompt, ending "Summary (max 80 chars):").
            let last = |p: &str| p.trim().rsplit('\n').next().unwrap_or_default().to_string();
            model.prompts().iter().map(|p| last(p)).find(|l| l.contains(&tail))
        })
        .await;
        let literal = profile.command_prefixes.iter().any(|c| lead.starts_with(c.as_str()));
        let whole = format!("{lead} on the command line");
        let expected = if literal { format!("{}{whole}", worksession::harness::LITERAL_PREFIX) } else { whole.clone() };
        assert_eq!(got, expected, "{name}: {whole:?} on the command line is taken as text, whole");
        cells.push(format!("`{}` → `{}`", &lead[..1], got.replace(&whole[1..], "…")));
    }
    cells.join("; ")
}

/// A WorkEvent sent while a slow turn streams: what became of it (queued, steered into the turn, or held until the
/// turn's end), never sent twice, and taken by the model once.
async fn during_a_turn(w: &World, model: &Model, name: &str, turns: bool) -> String {
    let slow =
        Reply::Slow { text: "one two three four five six seven eight".into(), every: Duration::from_millis(400) };
    model.on("conformance: a slow turn", slow);
    w.send("c", "slow", "conformance: a slow turn").await;
    support::until("the slow turn asked", || async { asked(model, "a slow turn") > 0 }).await;
    w.send("c", "during", "conformance: during the turn").await;
    let st = settled(w, "during").await;
    assert_eq!(st.phase, Some(PromptPhase::Delivered), "{name}: {st:?}");
    assert_eq!(st.attempts, 1, "{name}: never sent twice into a turn: {st:?}");
    support::until("the model got it", || async { asked(model, "during the turn") > 0 }).await;
    turn_over(w, turns).await;
    let times = asked(model, "during the turn");
    assert_eq!(times, 1, "{name}: the model got it once");
    let request =
        model.requests().into_iter().find(|r| r.prompt.as_deref().is_some_and(|p| p.contains("during the turn")));
    let whole = request.is_some_and(|r| r.body.to_string().contains("seven eight"));
    let how = if whole {
        "after the slow turn's whole reply"
    } else {
        "steered into the slow turn before its reply was whole"
    };
    format!("Delivered after one send; the model got it once, {how}")
}

/// A turn whose every model request fails (HTTP 500, `retry-after: 1`, `x-should-retry: false`), and a WorkEvent
/// sent while the CLI still works on it: how often the CLI asked, what `Activity` said, and what became of the event
/// behind it. Nothing is lost: the model gets it.
async fn behind_a_failed_turn(w: &World, model: &Model, name: &str, turns: bool) -> String {
    let headers = vec![("retry-after".into(), "1".into()), ("x-should-retry".into(), "false".into())];
    // Gemini CLI retries a 500 with a back-off of its own for minutes (measured: 5 requests in 90 s, its turn
    // `Working` throughout, so a prompt waits behind it): it gets an error no CLI retries.
    let status = if name == "gemini" { 400 } else { 500 };
    let error = Reply::Error { status, kind: "api_error".into(), message: "conformance boom".into(), headers };
    model.on("conformance: a failing turn", error);
    w.send("c", "failing", "conformance: a failing turn").await;
    support::until("the failing turn asked", || async { asked(model, "a failing turn") > 0 }).await;
    w.send("c", "behind", "conformance: behind the failure").await;
    let st = settled_within(w, "behind", SETTLE).await;
    support::eventually_within("the model got the prompt behind it", Duration::from_secs(120), || async {
        (asked(model, "behind the failure") > 0).then_some(())
    })
    .await;
    assert_eq!(st.phase, Some(PromptPhase::Delivered), "{name}: {st:?}");
    turn_over(w, turns).await;
    let tries = asked(model, "a failing turn");
    let activity = w.sessions().get("c").await.ok().and_then(|ws| condition(&ws, "Activity")).map(|c| c.1);
    let kube_events: kube::Api<k8s_openapi::api::events::v1::Event> = w.ns.api();
    let list = kube_events.list(&Default::default()).await.unwrap();
    let failed = list.items.iter().any(|e| e.reason.as_deref() == Some("TurnFailed"));
    format!(
        "HTTP {status}: the CLI asked {tries} time(s){}; the event behind it Delivered after {} send(s), in {} request(s) the model got; \
         Activity {} after",
        if failed { ", a TurnFailed Event" } else { "" },
        st.attempts,
        asked(model, "behind the failure"),
        activity.unwrap_or_else(|| "not reported".into())
    )
}

/// A person attached to the idle harness types its clear command: whether the CLI starts a new conversation, whether
/// the recorded id follows, and where a crash then resumes: in the conversation the person was in.
async fn a_persons_clear(w: &World, model: &Model, name: &str, turns: bool, first: &str) -> String {
    let clear = if name == "opencode" { "/new" } else { "/clear" };
    turn_over(w, turns).await;
    let before = recorded_id(&w.sessions().get("c").await.unwrap());
    // A person types once the CLI is done with its turn.
    idle_screen(w).await;
    let session = w.tmux_session("c");
    let hooks = worksession::node::hook::file_of(&w.tmux.state(), &format!("{}/c", w.ns.name));
    let said_before = std::fs::read_to_string(&hooks).unwrap_or_default().len();
    w.type_in(&session, clear);
    if name == "gemini" {
        // Under load Gemini CLI may still leave the command in its input box, ignoring the Enter: a person sees it there
        // and presses Enter again, until its SessionStart (source clear) says it cleared.
        enter_until(w, &session, || {
            let said = std::fs::read_to_string(&hooks).unwrap_or_default();
            said.get(said_before..).is_some_and(|s| s.contains(r#""source":"clear""#))
        })
        .await;
    }
    // The clear's own hooks (a new conversation's SessionStart, where the CLI has one) come before the next prompt is
    // taken; a CLI that says nothing leaves the id as it was.
    w.send("c", "after-clear", "conformance: after the clear").await;
    // Its deadline may send it again (Codex 0.171.0 lost a paste made as it started the new conversation).
    let sent = settled_within(w, "after-clear", SETTLE).await;
    assert_eq!(sent.phase, Some(PromptPhase::Delivered), "{name}: {sent:?}");
    let request = support::eventually("the model asked after the clear", || async {
        model.requests().into_iter().find(|r| r.prompt.as_deref().is_some_and(|p| p.contains("after the clear")))
    })
    .await;
    let cleared = !request.body.to_string().contains(first);
    turn_over(w, turns).await;
    let id = id_fate(w, &before).await;
    let body = crash_then(w, model, "after-clear-kill", "conformance: after the clear and a kill").await;
    let where_they_were = body.contains("after the clear");
    let before_it = body.contains(first);
    assert!(where_they_were, "{name}: a crash after `{clear}` resumes where the person was: {body}");
    format!(
        "`{clear}`: {}; the next prompt Delivered after {} send(s); recorded id {}; a crash then resumed where the \
         person was{}",
        if cleared { "a new conversation" } else { "the same conversation" },
        sent.attempts,
        id,
        if before_it && cleared { " (with the conversation before the clear too)" } else { "" }
    )
}

/// A person attached to the idle harness types its compaction command: whether the CLI asks its model for a summary,
/// whether the recorded id follows, and where the next prompt, and a crash after it, land: in the conversation the
/// person was in.
async fn a_persons_compaction(w: &World, model: &Model, name: &str, turns: bool) -> String {
    let compact = if name == "gemini" { "/compress" } else { "/compact" };
    turn_over(w, turns).await;
    idle_screen(w).await;
    let before = recorded_id(&w.sessions().get("c").await.unwrap());
    let asked_before = model.requests().len();
    let session = w.tmux_session("c");
    w.type_in(&session, compact);
    // Codex and Gemini may keep a command typed at once in their input box, its Enter taken by their command menu: a
    // person sees it there and presses Enter again, until the CLI asks its model for the summary (a request that is
    // none of the test's prompts: opencode quotes the conversation in it, so a prompt of ours is one whose last line
    // is ours, as each CLI sends it).
    let summary = || {
        let ours = |r: &support::model::Request| {
            r.prompt.as_deref().is_some_and(|p| p.trim().lines().last().is_some_and(|l| l.contains("conformance: ")))
        };
        model.requests().iter().skip(asked_before).any(|r| !ours(r))
    };
    let asked = enter_until(w, &session, summary).await;
    let since: Vec<_> = model.requests().into_iter().skip(asked_before).map(|r| r.prompt).collect();
    assert!(asked, "{name}: `{compact}` asked the model for a summary; the prompts it got since: {since:?}");
    turn_over(w, turns).await;
    idle_screen(w).await;
    w.send("c", "after-compact", "conformance: after the compaction").await;
    let sent = settled_within(w, "after-compact", SETTLE).await;
    assert_eq!(sent.phase, Some(PromptPhase::Delivered), "{name}: {sent:?}");
    support::eventually("the model asked after the compaction", || async {
        model.requests().into_iter().find(|r| r.prompt.as_deref().is_some_and(|p| p.contains("after the compaction")))
    })
    .await;
    turn_over(w, turns).await;
    let id = id_fate(w, &before).await;
    let body = crash_then(w, model, "after-compact-kill", "conformance: after the compaction and a kill").await;
    assert!(
        body.contains("after the compaction"),
        "{name}: a crash after `{compact}` resumes where the person was: {body}"
    );
    format!(
        "`{compact}`: the model asked for a summary; the next prompt Delivered after {} send(s); recorded id {}; a \
         crash then resumed where the person was",
        sent.attempts, id,
    )
}

/// Presses Enter in `session` as a person who sees their command still in the input box would, every 5 s, until
/// `done` (at most five times); whether it was done.
async fn enter_until(w: &World, session: &str, done: impl Fn() -> bool) -> bool {
    for _ in 0..5 {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !done() && std::time::Instant::now() < deadline {
            tokio::time::sleep(support::POLL).await;
        }
        if done() {
            return true;
        }
        let target = format!("={session}:");
        let enter = ["send-keys", "-t", target.as_str(), "Enter"];
        std::process::Command::new("tmux").arg("-S").arg(w.tmux.socket()).args(enter).status().unwrap();
    }
    done()
}

/// What became of the recorded id that was `before`: kept, or moved (the old one kept in `previousSessionIds`, or not).
async fn id_fate(w: &World, before: &str) -> &'static str {
    let ws = w.sessions().get("c").await.unwrap();
    let kept = ws.status.as_ref().is_some_and(|s| s.previous_session_ids.iter().any(|id| id == before));
    match (recorded_id(&ws) == before, kept) {
        (true, _) => "kept",
        (false, true) => "moved, the old one kept in previousSessionIds",
        (false, false) => "moved",
    }
}

/// Kills the harness of the session `c`, sends the WorkEvent `event` with `prompt`, and returns the body of the model
/// request that carried it (the conversation it resumed).
async fn crash_then(w: &World, model: &Model, event: &str, prompt: &str) -> String {
    w.tmux.kill_pane(&w.tmux_session("c")).await;
    w.send("c", event, prompt).await;
    settled(w, event).await;
    let resumed = support::eventually("the model asked after the kill", || async {
        model.requests().into_iter().find(|r| r.prompt.as_deref().is_some_and(|p| p.contains(prompt)))
    })
    .await;
    resumed.body.to_string()
}

/// Awaits the screen of the session `c` done with a turn's hooks: Gemini CLI 0.61.0 shows "Executing Hooks" a moment
/// after its AfterAgent fired, and takes no Enter meanwhile (a command typed then stays in its input box).
async fn idle_screen(w: &World) {
    let session = w.tmux_session("c");
    support::until("its screen done with the turn's hooks", || async {
        !w.screen(&session).contains("Executing Hooks")
    })
    .await;
}

/// The profile's resume of an unknown id, run directly in a terminal (`script`), as the agent runs it but without
/// tmux: its exit code, how long it took, its first words.
async fn unknown_id_run_directly(w: &World, name: &str) -> String {
    let profile = &worksession::harness::builtin()[name];
    let unknown = uuid::Uuid::new_v4().to_string();
    let args: Vec<String> = profile
        .resume
        .iter()
        .flatten()
        .filter(|a| a.as_str() != "{extraArgs}")
        .map(|a| a.replace("{sessionId}", &unknown).replace("{prompt}", "conformance"))
        .collect();
    let wrapper = w.tmux.state().join(format!("{name}-offline"));
    let quoted: Vec<String> =
        std::iter::once(wrapper.display().to_string()).chain(args).map(|a| format!("'{a}'")).collect();
    let started = std::time::Instant::now();
    // A terminal of the kind tmux gives its panes and of a known size, whatever ran the test: without `TERM`,
    // Claude Code moves the cursor to a column where the words have spaces, and `script` run without a terminal
    // gives 0×0, where it moves the cursor forward instead.
    let command = format!("stty cols 160 rows 40; exec {}", quoted.join(" "));
    let mut cmd = tokio::process::Command::new("script");
    cmd.args(["-qefc", &command, "/dev/null"]).env("TERM", "tmux-256color").current_dir(w.tmux.workdir());
    let Ok(Ok(out)) = tokio::time::timeout(Duration::from_secs(60), cmd.kill_on_drop(true).output()).await else {
        return "still running after 60 s".to_string();
    };
    let plain = rendered(&String::from_utf8_lossy(&out.stdout));
    let line = plain.lines().map(str::trim).find(|l| profile.resume_failed(l)).unwrap_or_default();
    let from = profile.resume_failed_pattern.as_ref().and_then(|p| p.find(line)).map_or(0, |m| m.start());
    let line: String = line[from..].chars().take(100).collect();
    let code = out.status.code().map_or("a signal".to_string(), |c| c.to_string());
    assert!(!line.is_empty(), "{name}: its resumeFailedPattern matches what it printed: {plain}");
    format!("exit {code} after {:.1} s: {line}", started.elapsed().as_secs_f32())
}

/// The words a terminal shows of `raw`, line by line: control sequences dropped, a cursor moved forward or to a
/// column further on standing for the spaces it skips, a tab for spaces to the next stop; a carriage return or a move
/// back starts a line of its own (what it overwrites stays as a line before it).
fn rendered(raw: &str) -> String {
    let escapes =
        regex::Regex::new(r"\x1b(\[([0-?]*)[ -/]*([@-~])|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|[0-9=>@-_])")
            .unwrap();
    let column = |plain: &String| plain[plain.rfind('\n').map_or(0, |i| i + 1)..].chars().count();
    let shown = |plain: &mut String, text: &str| {
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\n' => plain.push('\n'),
                '\r' if chars.peek().is_some_and(|n| *n != '\r' && *n != '\n') => plain.push('\n'),
                '\t' => plain.push_str(&" ".repeat(8 - column(plain) % 8)),
                c if !c.is_control() => plain.push(c),
                _ => {}
            }
        }
    };
    let mut plain = String::new();
    let mut last = 0;
    for c in escapes.captures_iter(raw) {
        let whole = c.get(0).unwrap();
        shown(&mut plain, &raw[last..whole.start()]);
        last = whole.end();
        let n = c.get(2).and_then(|n| n.as_str().parse().ok()).unwrap_or(1usize).max(1);
        match c.get(3).map(|f| f.as_str()) {
            Some("C") => plain.push_str(&" ".repeat(n)),
            Some("G") if n - 1 > column(&plain) => plain.push_str(&" ".repeat(n - 1 - column(&plain))),
            Some("G" | "D") if column(&plain) > 0 => plain.push('\n'),
            _ => {}
        }
    }
    shown(&mut plain, &raw[last..]);
    plain
}

#[test]
fn a_cursor_moved_to_a_column_or_forward_renders_as_spaces() {
    let raw = "\x1b7\x1b[r\x1b8No\x1b[4Gconversation\x1b[1Cfound\x1b[38;5;211m!\x1b[39m\r\r\n\x1b]0;\x07\x1b(Bnext";
    assert_eq!(rendered(raw), "No conversation found!\nnext");
    assert_eq!(rendered("café\x1b[7Gx"), "café  x", "columns count characters");
    assert_eq!(rendered("Loading...\rNo\x1b[4Gconversation"), "Loading...\nNo conversation", "a redrawn line");
    assert_eq!(rendered("spinner\x1b[GNo\x1b[4Gconversation"), "spinner\nNo conversation", "a move back");
    assert_eq!(rendered("a\tb"), "a       b");
}

#[tokio::test]
async fn claude_conforms() {
    conform("claude").await;
}

#[tokio::test]
async fn codex_conforms() {
    conform("codex").await;
}

#[tokio::test]
async fn gemini_conforms() {
    conform("gemini").await;
}

#[tokio::test]
async fn opencode_conforms() {
    conform("opencode").await;
}

#[tokio::test]
async fn copilot_conforms() {
    conform("copilot").await;
}

/// Copilot CLI's unknown id, run as the profile's resume runs it (measured: an older version started an empty session
/// under the id instead): it must say so and exit, as `resumeFailedPattern` expects.
#[tokio::test]
async fn copilot_unknown_id_fails_when_run_directly() {
    let unknown = uuid::Uuid::new_v4().to_string();
    let (exit, output, _) = support::clis::run("copilot", &[&format!("--resume={unknown}")]).await;
    assert_eq!(exit, Some(1), "{output}");
    assert!(worksession::harness::builtin()["copilot"].resume_failed(&output), "{output}");
}
