//! Per-repository settings from `.github/supervise.yml`, under the command line's
//! flags. Unknown keys are refused with the file and key named, so a typo is not
//! silently ignored.

use crate::engine::usage::{Price, Usd};
use crate::engine::{EngineConfig, ModelIds};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

mod preset;
pub use preset::Preset;

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    pub agent: Option<String>,
    pub max_parallel: Option<u32>,
    pub max_retries: Option<u32>,
    pub max_turns: Option<u32>,
    pub budget: Option<u64>,
    /// On GitHub: the repository's cap on what all its operations dispatch in
    /// any 24 hours, in the units of `budget`.
    pub daily_budget: Option<u64>,
    /// Cap on one operation's dollars, e.g. `5` or `12.50`: what its
    /// attempts cost, and what the next is expected to, checked before it
    /// starts.
    pub budget_usd: Option<Usd>,
    /// On GitHub: the repository's cap on what all its operations spend in
    /// any 24 hours, in dollars.
    pub daily_budget_usd: Option<Usd>,
    /// Dollars per million tokens by model id (`input`, `output`, and
    /// optionally `cache_read`, `cache_write`), for agents whose CLI
    /// reports tokens but no dollars.
    pub prices: Option<std::collections::BTreeMap<String, Price>>,
    /// The relative cost of one dispatch per tier (default haiku 1, sonnet 10,
    /// opus 30), for `budget` and `daily_budget`.
    pub costs: Option<CostsFile>,
    pub models: Option<ModelIdsFile>,
    /// A build/test command run at each phase boundary on the integration branch.
    pub build_gate: Option<String>,
    /// Seconds without agent output before the agent is cancelled.
    pub stall_timeout: Option<u64>,
    /// Minutes one attempt of an agent may run, output or not, before it is
    /// stopped and the attempt counts as failed.
    pub max_agent_minutes: Option<u64>,
    /// Seconds an exit-criterion command may run.
    pub verify_timeout: Option<u64>,
    /// Seconds an agent has to exit after SIGTERM (cancel, stop timeout) before
    /// it and everything it started are killed.
    pub kill_grace: Option<u64>,
    /// Seconds `stop` waits for agents to finish before force-terminating them.
    pub stop_timeout: Option<u64>,
    /// Milliseconds between supervisor ticks (stall checks, deferred polls, stop timeout).
    pub tick_ms: Option<u64>,
    /// `supervise serve`: the least role per command, e.g. `killall: admin`.
    pub permissions: Option<std::collections::BTreeMap<String, String>>,
    /// `supervise serve`: bot logins whose commands are acted on (exact match).
    pub bots: Option<Vec<String>>,
    /// On GitHub: the agent workflow's file name in `.github/workflows/`.
    pub workflow: Option<String>,
    /// Merge a verified sprint `immediately` or `after_review` (an
    /// approving review of its pull request; locally, `supervise review`).
    pub merge: Option<MergeMode>,
    /// On GitHub, when a sprint's pull request waits for review: how many
    /// people who may write must approve it (default 1).
    pub required_approvals: Option<std::num::NonZeroU32>,
    /// Fix rounds a sprint gets for reviews that ask for changes (default
    /// 3); one more and its unit is BLOCKED for the reviewer.
    pub review_rounds: Option<u32>,
    /// Work without a written plan (`solve`, `manage`): research agents,
    /// the research success share, debug rounds, the test command, max tasks.
    pub without_plan: Option<crate::engine::workflow::WorkflowSettings>,
    /// On GitHub: whether an agent's commits may change `.github/workflows/`
    /// (refused by default: a workflow runs with the repository's credentials).
    pub agent_may_change_workflows: Option<bool>,
    /// Locally: where notices go besides the terminal (an outgoing webhook).
    pub notify: Option<NotifySettings>,
    /// On GitHub: a notice a person must act on (a unit BLOCKED, the final
    /// verification failed) mentions whoever started the operation. Nothing
    /// else the App writes ever pings anyone.
    pub mention: Option<bool>,
    /// Locally, on Linux: each agent in a network namespace of its own,
    /// reaching only its model and `network:`'s domains (`--sandbox`).
    pub sandbox: Option<bool>,
    /// Where a sandboxed agent may connect besides its model: `off` for
    /// nowhere, or `allowed_domains:` (default: the package registries).
    pub network: Option<NetworkSettings>,
}

/// Where a sandboxed agent may connect, besides its model.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Egress {
    /// Domains (and their subdomains) the proxy opens connections to.
    pub allowed: Vec<String>,
}

/// The package registries a build needs: what `network:` allows unless it
/// says otherwise.
pub const REGISTRIES: &[&str] = &[
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "crates.io",
    "index.crates.io",
    "static.crates.io",
    "pypi.org",
    "files.pythonhosted.org",
    "proxy.golang.org",
    "sum.golang.org",
    "repo.maven.apache.org",
    "rubygems.org",
];

impl Egress {
    /// Whether `host` is an allowed domain or under one.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.allowed.iter().any(|d| {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            host == d || host.ends_with(&format!(".{d}"))
        })
    }
}

/// What `network:` allows: the registries unless it says otherwise.
pub fn egress(network: Option<NetworkSettings>) -> Egress {
    Egress {
        allowed: match network {
            None => REGISTRIES.iter().map(|d| d.to_string()).collect(),
            Some(NetworkSettings::Off(_)) => Vec::new(),
            Some(NetworkSettings::Allowed(a)) => a.allowed_domains,
        },
    }
}

/// `network:` — `off`, or the domains a sandboxed agent may reach.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum NetworkSettings {
    Off(NetworkOff),
    Allowed(AllowedDomains),
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NetworkOff {
    Off,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AllowedDomains {
    pub allowed_domains: Vec<String>,
}

/// An outgoing webhook for notices (see [`crate::notify`]). Its signing key
/// is never in a file: `SUPERVISE_NOTIFY_SECRET` on the supervisor's side.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NotifySettings {
    /// The receiver (`http://` or `https://`).
    pub url: Option<String>,
    /// `json` (the default) or `slack`.
    pub format: Option<crate::notify::Format>,
    /// The notices it wants (default: every one), by name: `blocked`,
    /// `held`, `budget_reached`, `manual_check`, `completed`, …
    pub events: Option<Vec<String>>,
}

impl NotifySettings {
    /// The receiver these settings name, `None` without a URL, or what is
    /// wrong with them.
    pub fn hook(&self) -> std::result::Result<Option<crate::notify::Hook>, String> {
        let Some(url) = self.url.as_deref().filter(|u| !u.trim().is_empty()) else {
            return Ok(None);
        };
        let kinds = self
            .events
            .iter()
            .flatten()
            .map(|e| crate::notify::kind_by_name(e))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        crate::notify::Hook::new(url, self.format.unwrap_or_default(), kinds).map(Some)
    }
}

#[derive(Debug, Clone, Copy, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MergeMode {
    #[default]
    Immediately,
    AfterReview,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CostsFile {
    pub haiku: Option<u64>,
    pub sonnet: Option<u64>,
    pub opus: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ModelIdsFile {
    pub haiku: Option<String>,
    pub sonnet: Option<String>,
    pub opus: Option<String>,
}

/// The settings a local run uses, after merging file and flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub engine: EngineConfig,
    pub agent: Option<String>,
    pub build_gate: Option<String>,
    pub verify_timeout_secs: u64,
    pub kill_grace_secs: u64,
    pub tick_ms: u64,
    pub without_plan: crate::engine::workflow::WorkflowSettings,
    /// An agent's commits may change `.github/workflows/`.
    pub agent_may_change_workflows: bool,
    /// Where notices go besides the terminal.
    pub notify: Option<crate::notify::Hook>,
    /// How a verified sprint is merged (`after_review`: once a person
    /// approves it).
    pub merge: MergeMode,
    /// Each agent in a network namespace of its own, reaching only its
    /// model and these domains (`None`: not sandboxed).
    pub sandbox: Option<Egress>,
}

/// Where a repository keeps its settings, from its top.
pub const REPO_FILE: &str = ".github/supervise.yml";

/// `.github/supervise.yml` in the plan's directory or any parent up to the repo root.
pub fn find_file(plan_root: &Path) -> Option<PathBuf> {
    plan_root
        .ancestors()
        .map(|d| d.join(".github/supervise.yml"))
        .find(|p| p.is_file())
}

pub fn read_file(path: &Path) -> Result<FileSettings> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text, &path.display().to_string()).map_err(anyhow::Error::msg)
}

/// Every key `.github/supervise.yml` may hold (the JSON Schema lists the same).
pub const KEYS: &[&str] = &[
    "agent",
    "max_parallel",
    "max_retries",
    "max_turns",
    "budget",
    "daily_budget",
    "budget_usd",
    "daily_budget_usd",
    "prices",
    "costs",
    "models",
    "build_gate",
    "stall_timeout",
    "max_agent_minutes",
    "verify_timeout",
    "kill_grace",
    "stop_timeout",
    "tick_ms",
    "permissions",
    "bots",
    "workflow",
    "merge",
    "required_approvals",
    "review_rounds",
    "without_plan",
    "agent_may_change_workflows",
    "notify",
    "mention",
    "sandbox",
    "network",
];

/// Parses settings text; the error names `origin`, the line and column, and the
/// valid keys.
pub fn parse(text: &str, origin: &str) -> std::result::Result<FileSettings, String> {
    if text.trim().is_empty() {
        return Ok(FileSettings::default());
    }
    let file: FileSettings = serde_yaml::from_str(text).map_err(|e| {
        let at = e.location().map(|l| format!(":{}:{}", l.line(), l.column())).unwrap_or_default();
        format!(
            "{origin}{at}: {e}\n  valid keys: {}\n  (models and costs: haiku, sonnet, opus; merge: immediately or after_review; schema: schema/supervise.schema.json)",
            KEYS.join(", ")
        )
    })?;
    if let Some(n) = &file.notify {
        n.hook().map_err(|e| format!("{origin}: notify: {e}"))?;
    }
    Ok(file)
}

impl Settings {
    /// File values first, then every flag that was given on top.
    pub fn merge(file: FileSettings, flags: FileSettings) -> Settings {
        let pick = |a: Option<u32>, b: Option<u32>, d: u32| b.or(a).unwrap_or(d);
        let d = EngineConfig::default();
        let models_file = file.models.clone().unwrap_or_default();
        let models_flag = flags.models.clone().unwrap_or_default();
        // A preset's word stands for its command, and its models are the
        // tiers' unless `models:` or the flags name others.
        let agent = flags.agent.or(file.agent);
        let preset = agent.as_deref().and_then(Preset::named);
        let dm = preset.map_or_else(ModelIds::default, Preset::models);
        let agent = preset.map(|p| p.command().to_string()).or(agent);
        let tick_ms = flags
            .tick_ms
            .or(file.tick_ms)
            .unwrap_or(2000)
            .clamp(10, 60_000);
        // The engine counts the stop timeout in ticks (§10's poll cycles).
        let stop_secs = flags.stop_timeout.or(file.stop_timeout).unwrap_or(60);
        let stop_ticks =
            (stop_secs.saturating_mul(1000).div_ceil(tick_ms)).clamp(1, u32::MAX as u64) as u32;
        let build_gate = flags
            .build_gate
            .or(file.build_gate)
            .filter(|s| !s.trim().is_empty());
        let merge = flags.merge.or(file.merge).unwrap_or_default();
        Settings {
            engine: EngineConfig {
                max_retries: pick(file.max_retries, flags.max_retries, d.max_retries).max(1),
                // At least one agent, whatever the settings say.
                max_parallel: std::num::NonZeroU32::new(pick(
                    file.max_parallel,
                    flags.max_parallel,
                    d.max_parallel.get(),
                ))
                .unwrap_or(std::num::NonZeroU32::MIN),
                max_turns: pick(file.max_turns, flags.max_turns, d.max_turns).max(1),
                budget: flags.budget.or(file.budget),
                budget_usd: flags.budget_usd.or(file.budget_usd),
                prices: file.prices.unwrap_or_default(),
                models: ModelIds {
                    haiku: models_flag.haiku.or(models_file.haiku).unwrap_or(dm.haiku),
                    sonnet: models_flag
                        .sonnet
                        .or(models_file.sonnet)
                        .unwrap_or(dm.sonnet),
                    opus: models_flag.opus.or(models_file.opus).unwrap_or(dm.opus),
                },
                build_gate: build_gate.is_some(),
                stall_timeout_secs: flags
                    .stall_timeout
                    .or(file.stall_timeout)
                    .unwrap_or(d.stall_timeout_secs)
                    .max(1),
                max_agent_secs: flags
                    .max_agent_minutes
                    .or(file.max_agent_minutes)
                    .map_or(d.max_agent_secs, |m| m.max(1).saturating_mul(60)),
                stop_timeout_ticks: stop_ticks,
                review_rounds: pick(file.review_rounds, flags.review_rounds, d.review_rounds),
                merge_after_review: merge == MergeMode::AfterReview,
                costs: {
                    let c = flags.costs.or(file.costs).unwrap_or_default();
                    [
                        c.haiku.unwrap_or(d.costs[0]),
                        c.sonnet.unwrap_or(d.costs[1]),
                        c.opus.unwrap_or(d.costs[2]),
                    ]
                },
                ..d
            },
            agent,
            build_gate,
            verify_timeout_secs: flags.verify_timeout.or(file.verify_timeout).unwrap_or(600),
            kill_grace_secs: flags.kill_grace.or(file.kill_grace).unwrap_or(10),
            tick_ms,
            without_plan: flags.without_plan.or(file.without_plan).unwrap_or_default(),
            agent_may_change_workflows: file.agent_may_change_workflows.unwrap_or(false),
            notify: notify(file.notify, flags.notify),
            merge,
            sandbox: flags
                .sandbox
                .or(file.sandbox)
                .unwrap_or(false)
                .then(|| egress(flags.network.or(file.network))),
        }
    }
}

/// The receiver of notices: the file's, each part the flags give on top.
/// Both were checked where they were read; one that is wrong here is said
/// and left out.
fn notify(
    file: Option<NotifySettings>,
    flags: Option<NotifySettings>,
) -> Option<crate::notify::Hook> {
    let mut n = file.unwrap_or_default();
    if let Some(f) = flags {
        n.url = f.url.or(n.url);
        n.format = f.format.or(n.format);
        n.events = f.events.or(n.events);
    }
    n.hook()
        .map_err(|e| tracing::warn!(error = %e, "notify: not used"))
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_and_typos_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("supervise.yml");
        std::fs::write(
            &p,
            "max_parallel: 2\nbudget: 100\nmodels:\n  opus: claude-opus-4\n",
        )
        .unwrap();
        let file = read_file(&p).unwrap();
        let s = Settings::merge(
            file,
            FileSettings {
                max_parallel: Some(5),
                ..Default::default()
            },
        );
        assert_eq!(s.engine.max_parallel.get(), 5);
        assert_eq!(s.engine.budget, Some(100));
        assert_eq!(s.engine.models.opus, "claude-opus-4");
        assert_eq!(s.engine.models.haiku, "haiku");
        std::fs::write(&p, "max_paralel: 2\n").unwrap();
        let err = read_file(&p).unwrap_err().to_string();
        assert!(
            err.contains("supervise.yml:1:1") && err.contains("max_paralel"),
            "{err}"
        );
    }
}
