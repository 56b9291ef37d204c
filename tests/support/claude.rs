//! The real Claude Code CLI offline, as `../shared/guides/harnesses.md` describes: its own `HOME` with onboarding
//! done and the workdir trusted, a dummy API key, and its API either a scripted model (`super::model`: real turns) or
//! unreachable (its API calls fail and are retried; the TUI stays up and no turn ever ends).

use std::path::{Path, PathBuf};

use serde_json::json;

/// The dummy key: a key of the right shape, approved in the CLI's own config.
pub const KEY: &str = "sk-ant-api03-worksession-offline-test-key-00000000000000";

/// The CLI that `scripts/testenv install-claude` installed.
pub fn bin() -> PathBuf {
    let out =
        std::process::Command::new(super::repo_root().join("scripts/testenv")).arg("claude-bin").output().unwrap();
    let bin = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(bin.exists(), "{} is missing: run `scripts/testenv install-claude` (scripts/test does)", bin.display());
    bin
}

/// The agent config's `claude` profile (under `harnesses:`): the built-in one, its binary a wrapper that runs the
/// installed CLI offline with `home` as its `HOME`, `workdir` trusted, its API unreachable.
pub fn offline_profile(home: &Path, workdir: &Path) -> String {
    profile_with(home, workdir, &[])
}

/// The same, its API the scripted `model`: its turns end.
pub fn scripted_profile(home: &Path, workdir: &Path, model: &super::model::Model) -> String {
    profile_with(home, workdir, &[("ANTHROPIC_BASE_URL", model.base_url())])
}

/// The same, with `env` on top of the offline environment (its API's URL, say, or a key gateway's with the proxy
/// variables a room's harness gets).
pub fn profile_with(home: &Path, workdir: &Path, env: &[(&str, String)]) -> String {
    let config = json!({
        "hasCompletedOnboarding": true,
        "projects": {workdir.display().to_string(): {"hasTrustDialogAccepted": true}},
        "customApiKeyResponses": {"approved": [&KEY[KEY.len() - 20..]], "rejected": []},
    });
    std::fs::write(home.join(".claude.json"), config.to_string()).unwrap();
    let wrapper = home.join("claude-offline");
    let exports: String = env.iter().map(|(name, value)| format!(" {name}='{value}'")).collect();
    let script = format!(
        "#!/bin/sh\nexport HOME='{home}' ANTHROPIC_API_KEY='{KEY}'{exports} DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\nexec '{bin}' \"$@\"\n",
        home = home.display(),
        bin = bin().display(),
    );
    std::fs::write(&wrapper, script).unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&wrapper).status().unwrap();
    format!("  claude:\n    binary: {}\n", wrapper.display())
}
