//! A harness profile as written: under `harnesses:` in the agent config, and in the built-in catalogue
//! (`catalogue.yaml`), one shape and one parser for both. A key left out keeps the base profile's (the built-in one
//! of that name, for the config); an empty pattern or path turns the base's off.

use regex::Regex;
use serde::Deserialize;

use super::{COMMAND_PREFIXES, Discover, LogLine, Profile, TemplateError};

/// A profile as written.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProfileFile {
    binary: Option<String>,
    extra_args: Option<Vec<String>>,
    interactive: Option<Vec<String>>,
    resume: Option<Vec<String>>,
    resume_failed_pattern: Option<String>,
    resume_busy_pattern: Option<String>,
    ready_pattern: Option<String>,
    busy_pattern: Option<String>,
    conversation_path: Option<String>,
    store_path: Option<String>,
    discover: Option<DiscoverFile>,
    command_prefixes: Option<Vec<String>>,
    /// A hook style ([`super::hooks::Hooks`]), or empty to turn a built-in profile's off.
    hooks: Option<String>,
    /// Variables over the base's (a value `null` takes one of the base's away).
    env: Option<std::collections::BTreeMap<String, Option<String>>>,
    queues_prompts: Option<bool>,
    handoff: Option<bool>,
    usage: Option<UsageFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct UsageFile {
    /// A format's name, or empty to turn a built-in profile's off.
    format: String,
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DiscoverFile {
    path: Option<String>,
    #[serde(default)]
    names_workdir: bool,
    screen_pattern: Option<String>,
    log: Option<LogLineFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LogLineFile {
    path: String,
    pattern: String,
}

impl ProfileFile {
    /// The profile `name` over `base` (what a key left out keeps), validated; the error names the key.
    pub fn into_profile(self, name: &str, base: Option<Profile>) -> Result<Profile, TemplateError> {
        let invalid = |key: &str, problem: String| TemplateError { key: format!("harnesses.{name}.{key}"), problem };
        let binary = self.binary.or_else(|| base.as_ref().map(|b| b.binary.clone()));
        let binary =
            binary.ok_or_else(|| invalid("binary", "is required for a profile that is not built in".into()))?;
        // An empty pattern turns off what the base has.
        let regex = |pattern: Option<String>, key: &str, inherited: Option<Regex>| match pattern {
            Some(p) if p.is_empty() => Ok(None),
            Some(p) => Regex::new(&p).map(Some).map_err(|e| invalid(key, e.to_string())),
            None => Ok(inherited),
        };
        let resume_failed_pattern = regex(
            self.resume_failed_pattern,
            "resumeFailedPattern",
            base.as_ref().and_then(|b| b.resume_failed_pattern.clone()),
        )?;
        let resume_busy_pattern = regex(
            self.resume_busy_pattern,
            "resumeBusyPattern",
            base.as_ref().and_then(|b| b.resume_busy_pattern.clone()),
        )?;
        let ready_pattern =
            regex(self.ready_pattern, "readyPattern", base.as_ref().and_then(|b| b.ready_pattern.clone()))?;
        let busy_pattern = regex(self.busy_pattern, "busyPattern", base.as_ref().and_then(|b| b.busy_pattern.clone()))?;
        // Variables merge by name over the base's, as the profile's other keys do.
        let mut env = base.as_ref().map(|b| b.env.clone()).unwrap_or_default();
        for (key, value) in self.env.unwrap_or_default() {
            env.retain(|(k, _)| *k != key);
            env.extend(value.map(|v| (key, v)));
        }
        let discover = match self.discover {
            Some(d) => Some(Discover {
                path: d.path,
                names_workdir: d.names_workdir,
                screen_pattern: regex(d.screen_pattern, "discover.screenPattern", None)?,
                log: d.log.map(|l| LogLine { path: l.path, pattern: l.pattern }),
            }),
            None => base.as_ref().and_then(|b| b.discover.clone()),
        };
        // An empty path turns the base's off.
        let path = |path: Option<String>, inherited: Option<String>| match path {
            Some(path) => Some(path).filter(|p| !p.is_empty()),
            None => inherited,
        };
        let hooks = match self.hooks.as_deref() {
            None => base.as_ref().and_then(|b| b.hooks),
            Some("") => None,
            Some(name) => Some(super::hooks::Hooks::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = super::hooks::Hooks::ALL.iter().map(|h| h.as_str()).collect();
                invalid("hooks", format!("unknown hooks {name:?} (known: {})", known.join(", ")))
            })?),
        };
        let usage = match self.usage {
            None => base.as_ref().and_then(|b| b.usage.clone()),
            Some(u) if u.format.is_empty() => None,
            Some(u) => {
                let known = super::usage::UsageFormat::ALL;
                let format = known.iter().find(|(n, _)| *n == u.format).map(|(_, f)| *f).ok_or_else(|| {
                    let names: Vec<&str> = known.iter().map(|(n, _)| *n).collect();
                    invalid("usage.format", format!("unknown format {:?} (known: {})", u.format, names.join(", ")))
                })?;
                Some(super::usage::UsageRecord { format, path: u.path.filter(|p| !p.is_empty()) })
            }
        };
        let profile = Profile {
            usage,
            hooks,
            binary,
            extra_args: self.extra_args.or_else(|| base.as_ref().map(|b| b.extra_args.clone())).unwrap_or_default(),
            interactive: self.interactive.or_else(|| base.as_ref().and_then(|b| b.interactive.clone())),
            resume: self.resume.or_else(|| base.as_ref().and_then(|b| b.resume.clone())),
            resume_failed_pattern,
            resume_busy_pattern,
            env,
            ready_pattern,
            busy_pattern,
            conversation_path: path(self.conversation_path, base.as_ref().and_then(|b| b.conversation_path.clone())),
            store_path: path(self.store_path, base.as_ref().and_then(|b| b.store_path.clone())),
            discover,
            queues_prompts: self.queues_prompts.or_else(|| base.as_ref().map(|b| b.queues_prompts)).unwrap_or(true),
            handoff: self.handoff.or_else(|| base.as_ref().map(|b| b.handoff)).unwrap_or(true),
            command_prefixes: self
                .command_prefixes
                .or_else(|| base.as_ref().map(|b| b.command_prefixes.clone()))
                .unwrap_or_else(|| COMMAND_PREFIXES.iter().map(|p| p.to_string()).collect()),
        };
        profile.validate(name)?;
        Ok(profile)
    }
}
