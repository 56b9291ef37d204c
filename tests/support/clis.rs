//! The real harness CLIs `scripts/testenv install-clis` installs (Gemini, Copilot, opencode, Codex) and Claude Code,
//! run offline: each in its own `HOME`, behind a wrapper that sets its environment, and either with its model
//! unreachable or pointed at the scripted model (`super::model`), the way each CLI takes a model of its own.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::model::Model;

/// The CLI `scripts/testenv install-clis` installed.
pub fn bin(name: &str) -> PathBuf {
    let out = std::process::Command::new(super::repo_root().join("scripts/testenv"))
        .args(["cli-bin", name])
        .output()
        .unwrap();
    let bin = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(bin.exists(), "{} is missing: run `scripts/testenv install-clis` (scripts/test does)", bin.display());
    bin
}

/// The environment each CLI runs offline in: its own `HOME`, a dummy key where it wants one.
pub fn env_of(name: &str) -> &'static [(&'static str, &'static str)] {
    match name {
        "gemini" => &[("GEMINI_API_KEY", "worksession-offline-test-key")],
        _ => &[],
    }
}

/// Runs `name` with `args` in a fresh `HOME`; its exit code, everything it printed, and how long it took.
pub async fn run(name: &str, args: &[&str]) -> (Option<i32>, String, Duration) {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(bin(name));
    cmd.args(args).env("HOME", home.path()).current_dir(home.path()).kill_on_drop(true);
    for (k, v) in env_of(name) {
        cmd.env(k, v);
    }
    let started = std::time::Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output()).await.expect("the CLI exits").unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text, started.elapsed())
}

/// The agent config's `name` profile (under `harnesses:`): the built-in one, its binary a wrapper that runs the
/// installed CLI with `home` as its `HOME`, its model unreachable.
pub fn offline_profile(name: &str, home: &Path) -> String {
    profile_with(name, home, &[])
}

/// The same, its model the scripted `model` (its turns end), `workdir` trusted where the CLI asks: Claude Code by
/// `ANTHROPIC_BASE_URL`, opencode's `anthropic` provider by its global config, Gemini CLI by `GOOGLE_GEMINI_BASE_URL`
/// (its auth type chosen, the folder trusted), Codex by a custom model provider in its config (no account, so no
/// sign-in screen), each on a model that needs no other call first.
pub fn scripted_profile(name: &str, home: &Path, workdir: &Path, model: &Model) -> String {
    match name {
        "claude" => super::claude::scripted_profile(home, workdir, model),
        "opencode" => {
            let base = format!("{}/v1", model.base_url());
            let config = json!({
                "provider": {"anthropic": {"options": {"baseURL": base, "apiKey": "dummy"}}},
                "model": "anthropic/claude-haiku-4-5",
                "autoupdate": false,
            });
            std::fs::create_dir_all(home.join(".config/opencode")).unwrap();
            std::fs::write(home.join(".config/opencode/opencode.json"), config.to_string()).unwrap();
            profile_with(name, home, &[("OPENCODE_DISABLE_MODELS_FETCH", "1"), ("OPENCODE_DISABLE_AUTOUPDATE", "1")])
        }
        "gemini" => {
            std::fs::create_dir_all(home.join(".gemini")).unwrap();
            let trusted = json!({workdir.display().to_string(): "TRUST_FOLDER"});
            std::fs::write(home.join(".gemini/trustedFolders.json"), trusted.to_string()).unwrap();
            let settings = json!({"security": {"auth": {"selectedType": "gemini-api-key"}}});
            std::fs::write(home.join(".gemini/settings.json"), settings.to_string()).unwrap();
            let url = model.base_url();
            profile_with(name, home, &[("GOOGLE_GEMINI_BASE_URL", &url)])
                + "    extraArgs: [\"-m\", \"gemini-2.5-flash\"]\n"
        }
        "codex" => {
            std::fs::create_dir_all(home.join(".codex")).unwrap();
            std::fs::write(home.join(".codex/config.toml"), codex_config(model, workdir)).unwrap();
            profile_with(name, home, &[])
        }
        // Copilot CLI through its bring-your-own-key provider, offline (no GitHub account): Anthropic's API.
        "copilot" => {
            std::fs::create_dir_all(home.join(".copilot")).unwrap();
            let trusted = json!({"trustedFolders": [workdir]});
            std::fs::write(home.join(".copilot/config.json"), trusted.to_string()).unwrap();
            let url = model.base_url();
            let env = [
                ("COPILOT_OFFLINE", "true"),
                ("COPILOT_PROVIDER_BASE_URL", url.as_str()),
                ("COPILOT_PROVIDER_TYPE", "anthropic"),
                ("COPILOT_PROVIDER_API_KEY", "dummy"),
                ("COPILOT_MODEL", "claude-haiku-4-5"),
            ];
            profile_with(name, home, &env)
        }
        _ => unreachable!("no scripted model for {name}"),
    }
}

/// Codex's config pointing it at the scripted `model` through a custom provider, `workdir` trusted.
fn codex_config(model: &Model, workdir: &Path) -> String {
    format!(
        "model = \"mock-model\"\nmodel_provider = \"mock\"\ncheck_for_update_on_startup = false\n\
         [model_providers.mock]\nname = \"mock\"\nbase_url = \"{}/v1\"\nwire_api = \"responses\"\n\
         request_max_retries = 0\nstream_max_retries = 0\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
        model.base_url(),
        workdir.display()
    )
}

fn profile_with(name: &str, home: &Path, env: &[(&str, &str)]) -> String {
    let wrapper = home.join(format!("{name}-offline"));
    let exports: String = env_of(name).iter().chain(env.iter()).map(|(k, v)| format!(" {k}='{v}'")).collect();
    let script = format!(
        "#!/bin/sh\nexport HOME='{home}'{exports}\nexec '{bin}' \"$@\"\n",
        home = home.display(),
        bin = bin(name).display()
    );
    std::fs::write(&wrapper, script).unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&wrapper).status().unwrap();
    format!("  {name}:\n    binary: {}\n", wrapper.display())
}
