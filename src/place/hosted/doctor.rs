//! `supervise doctor`: everything a first operation on GitHub needs, each
//! checked against GitHub itself and answered with ✓ or what to do — the
//! App's key (GitHub accepts its JWT), the installation on the repository
//! and its permissions and events against the App's manifest, the webhook's
//! recent deliveries as GitHub recorded them, the service's `/readyz`, the
//! agent workflow on the default branch and the inputs this version sends
//! it, the secrets its agents need (names only), the plan and the settings.

use crate::contract::AGENT_WORKFLOW_INPUTS;
use crate::github::answers::{read, AppInfo, HookDelivery, Installation, SecretNames};
use crate::github::repo::Repo;
use crate::github::{GitHub, GitHubError};
use serde::Serialize;

/// The App's manifest (`deploy/app-manifest.json`): what it must be granted.
pub const MANIFEST: &str = include_str!("../../../deploy/app-manifest.json");

/// The model providers' keys an agent workflow reads; one must be set.
const PROVIDER_SECRETS: [&str; 3] = ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    /// Not checked (nothing to check it with, or an earlier check failed).
    Skipped,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub check: &'static str,
    pub verdict: Verdict,
    /// What was found.
    pub detail: String,
    /// What to do, when it failed.
    pub fix: Option<String>,
}

impl Finding {
    pub fn pass(check: &'static str, detail: impl Into<String>) -> Finding {
        Finding {
            check,
            verdict: Verdict::Pass,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn fail(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding {
            check,
            verdict: Verdict::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn skipped(check: &'static str, why: impl Into<String>) -> Finding {
        Finding {
            check,
            verdict: Verdict::Skipped,
            detail: why.into(),
            fix: None,
        }
    }
}

/// What to check.
pub struct Target<'a> {
    pub github: &'a GitHub,
    /// `owner/name`.
    pub repo: &'a str,
    /// GitHub's web address, for the links in the fixes.
    pub web_url: &'a str,
    /// The service's address, to ask its `/readyz`.
    pub service_url: Option<&'a str>,
    /// The plan's path in the repository.
    pub plan: &'a str,
}

/// Orders permission levels: `write` covers `read`, `admin` both.
fn level(l: &str) -> u8 {
    match l {
        "read" => 1,
        "write" => 2,
        "admin" => 3,
        _ => 0,
    }
}

/// Why a webhook delivery failed, from what the receiver answered.
fn delivery_reason(code: i64) -> &'static str {
    match code {
        0 => "no answer: the webhook URL is unreachable from GitHub (a wrong host or port, a firewall, the service down)",
        401 => "the signature was refused: GITHUB_WEBHOOK_SECRET differs from the webhook secret in the App's settings",
        404 | 405 => "not found: the webhook URL's path is not `/webhook` (or `/api/github/webhooks`)",
        413 => "too large for the service's body limit",
        500..=599 => "the service failed: see its log for the delivery's id",
        _ => "refused by the receiver",
    }
}

/// What the App's manifest asks of an installation.
#[derive(Debug, Default, serde::Deserialize)]
struct Manifest {
    #[serde(default)]
    default_permissions: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    default_events: Vec<String>,
}

/// Runs every check; the ones that cannot run without an earlier one say so.
pub async fn check(t: &Target<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    // 1. The App's key.
    let (found, app) = app_credentials(t).await;
    out.push(found);
    let slug = app
        .as_ref()
        .and_then(|a| a.slug.clone())
        .unwrap_or_else(|| "your-app".into());
    // 2. The installation, its permissions and events.
    let installation = match &app {
        None => {
            out.push(Finding::skipped(
                "Installation",
                "needs the App's credentials",
            ));
            None
        }
        Some(_) => {
            let (found, installation) = installation(t, &slug).await;
            out.push(found);
            installation
        }
    };
    match &installation {
        None => {
            out.push(Finding::skipped("Permissions", "needs the installation"));
            out.push(Finding::skipped("Events", "needs the installation"));
        }
        Some(i) => out.extend(grants(t, i, &slug)),
    }
    // 3. The webhook's recent deliveries.
    out.push(match &app {
        None => Finding::skipped("Webhook deliveries", "needs the App's credentials"),
        Some(_) => deliveries(t).await,
    });
    // 4. The service.
    out.push(match t.service_url {
        None => Finding::skipped("Service", "no --service-url given"),
        Some(url) => ready(url).await,
    });
    // 5–8. The repository: the agent workflow, secrets, plan, settings.
    let Some(i) = installation else {
        for c in ["Agent workflow", "Secrets", "Plan", "Settings"] {
            out.push(Finding::skipped(c, "needs the installation"));
        }
        return out;
    };
    let repo = Repo {
        gh: t.github,
        installation: i.id,
        name: t.repo,
    };
    out.push(agent_workflow(t, &repo).await);
    let (found, secret_names) = secrets(t, i.id).await;
    out.push(found);
    out.push(plan(t, &repo).await);
    out.push(settings(&repo).await);
    let file = |path: &str| {
        let repo = &repo;
        let path = path.to_string();
        async move { repo.file(&path, None).await.ok().flatten().map(|(t, _)| t) }
    };
    let workflow = file(&format!(".github/workflows/{}", super::DEFAULT_WORKFLOW)).await;
    let settings_text = file(crate::settings::REPO_FILE).await;
    let script = file(AGENT_SCRIPT).await.is_some();
    out.push(agent(
        workflow.as_deref(),
        settings_text.as_deref(),
        script,
        secret_names.as_deref(),
    ));
    if let Some(w) = &workflow {
        out.push(release(w).await);
    }
    out
}

/// The release the agent workflow installs `supervise` from: the defaults
/// it pins for `SUPERVISE_REPOSITORY` and `SUPERVISE_VERSION` (repository
/// variables of those names take their place).
pub fn pinned_release(workflow: &str) -> Option<(String, String)> {
    let default_of = |var: &str| {
        let marker = format!("vars.{var} || '");
        let at = workflow.find(&marker)? + marker.len();
        Some(workflow[at..].split('\'').next()?.to_string())
    };
    Some((
        default_of("SUPERVISE_REPOSITORY")?,
        default_of("SUPERVISE_VERSION")?,
    ))
}

/// Whether the release the workflow pins answers: its SHA256SUMS, which
/// every job's install step downloads first. SUPERVISE_RELEASE_BASE stands
/// for `https://github.com/OWNER/REPO/releases/download`, as for
/// `scripts/install-release`.
async fn release(workflow: &str) -> Finding {
    const CHECK: &str = "Release";
    let Some((repo, version)) = pinned_release(workflow) else {
        return Finding::skipped(CHECK, "the agent workflow names no release to install from");
    };
    let base = std::env::var("SUPERVISE_RELEASE_BASE")
        .unwrap_or_else(|_| format!("https://github.com/{repo}/releases/download"));
    let url = format!("{}/{version}/SHA256SUMS", base.trim_end_matches('/'));
    let Ok(uri) = url.parse::<http::Uri>() else {
        return Finding::skipped(CHECK, format!("{url} is not an address"));
    };
    let connector = match hyper_rustls::HttpsConnectorBuilder::new().with_native_roots() {
        Ok(b) => b.https_or_http().enable_http1().build(),
        Err(e) => return Finding::skipped(CHECK, format!("no TLS roots to ask {url}: {e}")),
    };
    let client: hyper_util::client::legacy::Client<_, http_body_util::Empty<hyper::body::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    let asked = tokio::time::timeout(std::time::Duration::from_secs(10), client.get(uri)).await;
    let how = format!(
        "the workflow installs supervise {version} from the releases of {repo} (the variables SUPERVISE_VERSION and SUPERVISE_REPOSITORY, when set, take their place)"
    );
    match asked {
        // GitHub answers a release asset with a redirect to its storage.
        Ok(Ok(r)) if r.status().is_success() || r.status().is_redirection() => {
            Finding::pass(CHECK, format!("{how}; it answers"))
        }
        Ok(Ok(r)) => Finding::fail(
            CHECK,
            format!("{how}, but {url} answers {}: every agent job would fail at its install step", r.status()),
            "set the repository variable SUPERVISE_VERSION to a published release tag, or SUPERVISE_REPOSITORY to a fork whose release workflow (.github/workflows/release.yml) has published one",
        ),
        Ok(Err(e)) => Finding::skipped(CHECK, format!("{how}; {url} could not be asked: {e}")),
        Err(_) => Finding::skipped(CHECK, format!("{how}; {url} gave no answer in 10 s")),
    }
}

/// The file the workflow's `script` agent runs by default.
const AGENT_SCRIPT: &str = ".github/supervise-agent.sh";

/// What needs no credential, read from a clone of the repository (`file`
/// reads a path of its working tree): the plan, the settings, the agent
/// workflow and its version, and the agent it would run with the secret
/// that agent needs. A newcomer sees everything left to do at once.
pub async fn local(file: &dyn Fn(&str) -> Option<String>, plan_path: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    out.push(match file(plan_path) {
        Some(text) => plan_read(&text, plan_path, &format!("{plan_path} here")),
        None => Finding::skipped(
            "Plan",
            format!("no {plan_path} here (work without a plan needs none)"),
        ),
    });
    let settings_file = crate::settings::REPO_FILE;
    let settings_text = file(settings_file);
    out.push(
        match settings_text
            .as_deref()
            .map(|t| crate::settings::parse(t, settings_file))
        {
            None => Finding::pass("Settings", format!("no {settings_file} here: the defaults")),
            Some(Ok(_)) => Finding::pass("Settings", format!("{settings_file} here is valid")),
            Some(Err(e)) => Finding::fail(
                "Settings",
                e,
                format!("fix {settings_file}; the schema is schema/supervise.schema.json"),
            ),
        },
    );
    let path = format!(".github/workflows/{}", super::DEFAULT_WORKFLOW);
    let workflow = file(&path);
    out.push(match workflow.as_deref() {
        None => Finding::fail(
            "Agent workflow",
            format!("{path} is not in this clone"),
            "`supervise setup --repo <owner/name>` opens a pull request adding it; merge it, then pull",
        ),
        Some(text) if text == super::starter::AGENT_WORKFLOW => {
            Finding::pass("Agent workflow", format!("{path} is this version's"))
        }
        Some(text) => match workflow_inputs(text, &path) {
            f if f.verdict == Verdict::Pass => Finding::pass(
                "Agent workflow",
                format!("{path} takes every input this version sends (it differs from this version's; `supervise setup` proposes this version's)"),
            ),
            f => f,
        },
    });
    out.push(agent(
        workflow.as_deref(),
        settings_text.as_deref(),
        file(AGENT_SCRIPT).is_some(),
        None,
    ));
    if let Some(w) = &workflow {
        out.push(release(w).await);
    }
    out
}

/// The agent the workflow would run — `agent:` in the settings, Claude
/// Code when it names none; an older workflow's `script` default — and
/// whether what it needs is there: the script file, the model key's
/// secret (when the secret names could be read).
pub fn agent(
    workflow: Option<&str>,
    settings: Option<&str>,
    script_exists: bool,
    secrets: Option<&[String]>,
) -> Finding {
    use crate::settings::Preset;
    const CHECK: &str = "Agent";
    let older_default = workflow.is_some_and(|w| w.contains("vars.SUPERVISE_AGENT || 'script'"));
    let named = settings
        .and_then(|t| crate::settings::parse(t, crate::settings::REPO_FILE).ok())
        .and_then(|f| f.agent);
    if older_default && !script_exists {
        return Finding::fail(
            CHECK,
            format!("the agent workflow (an older version) runs {AGENT_SCRIPT} unless the variable SUPERVISE_AGENT is set, and the repository has no such file"),
            "replace the workflow with this version's (`supervise setup --repo <owner/name>`), which runs the agent `agent:` names in .github/supervise.yml",
        );
    }
    let preset = match named.as_deref() {
        None => Preset::Claude,
        Some(word) => match Preset::named(word) {
            Some(p) => p,
            None => {
                return Finding::fail(
                    CHECK,
                    format!("agent: `{word}` in {} is a command for local runs; the agent workflow runs claude, codex or gemini", crate::settings::REPO_FILE),
                    format!("set `agent: claude` (or codex, gemini); for a script of your own, set the repository variable SUPERVISE_AGENT to script and commit {AGENT_SCRIPT}"),
                )
            }
        },
    };
    let said = match named {
        Some(_) => format!("agent: {}", preset.workflow_kind()),
        None => "no agent: in the settings".to_string(),
    };
    match secrets {
        Some(names) if !names.iter().any(|n| n == preset.secret()) => Finding::fail(
            CHECK,
            format!(
                "the workflow runs {} ({said}), whose key {} is not among the repository's secrets",
                preset.product(),
                preset.secret()
            ),
            format!(
                "add the repository secret {} (Settings → Secrets and variables → Actions)",
                preset.secret()
            ),
        ),
        Some(_) => Finding::pass(
            CHECK,
            format!(
                "the workflow runs {} ({said}); its key {} is set",
                preset.product(),
                preset.secret()
            ),
        ),
        None => Finding::pass(
            CHECK,
            format!(
                "the workflow runs {} ({said}); it needs the repository secret {}",
                preset.product(),
                preset.secret()
            ),
        ),
    }
}

/// 1. Whether GitHub accepts the App's key, and the App it belongs to.
async fn app_credentials(t: &Target<'_>) -> (Finding, Option<AppInfo>) {
    const CHECK: &str = "App credentials";
    match t.github.app_get("/app").await {
        Ok(r) => match serde_json::from_str(&r.body)
            .map_err(|e| e.to_string())
            .and_then(|v| read::<AppInfo>("GET /app", v).map_err(|e| e.to_string()))
        {
            Ok(a) => (
                Finding::pass(
                    CHECK,
                    format!("GitHub accepts the key of App {} (id {})", a.name, a.id),
                ),
                Some(a),
            ),
            Err(e) => (
                Finding::fail(CHECK, e, "check GITHUB_API_URL: it must be GitHub's REST API"),
                None,
            ),
        },
        Err(GitHubError::Http {
            status: 401, body, ..
        }) => (
            Finding::fail(
                CHECK,
                format!("GitHub refuses the App's JWT (401: {body})"),
                "GITHUB_APP_ID and the private key do not belong together: generate a new private key on the App's settings page and point GITHUB_PRIVATE_KEY_PATH at it",
            ),
            None,
        ),
        Err(e) => (
            Finding::fail(
                CHECK,
                e.to_string(),
                "check GITHUB_API_URL and that GitHub can be reached",
            ),
            None,
        ),
    }
}

/// 2. The App's installation on the repository.
async fn installation(t: &Target<'_>, slug: &str) -> (Finding, Option<Installation>) {
    const CHECK: &str = "Installation";
    match t.github.repo_installation(t.repo).await {
        Ok(Some(i)) => (
            Finding::pass(
                CHECK,
                format!("installed on {} (installation {})", t.repo, i.id),
            ),
            Some(i),
        ),
        Ok(None) => (
            Finding::fail(
                CHECK,
                format!("the App is not installed on {}", t.repo),
                format!(
                    "install it: {}/apps/{slug}/installations/new (choose {})",
                    t.web_url, t.repo
                ),
            ),
            None,
        ),
        Err(e @ GitHubError::Unexpected { .. }) => (
            Finding::fail(
                CHECK,
                e.to_string(),
                "report this answer: GitHub's installation is not what its API describes",
            ),
            None,
        ),
        Err(e) => (
            Finding::fail(
                CHECK,
                e.to_string(),
                "check the repository's name (owner/name)",
            ),
            None,
        ),
    }
}

/// 2. The installation's permissions and events against the manifest's.
fn grants(t: &Target<'_>, i: &Installation, slug: &str) -> [Finding; 2] {
    let manifest: Manifest = serde_json::from_str(MANIFEST).unwrap_or_default();
    let settings = format!("{}/settings/apps/{slug}/permissions", t.web_url);
    let short: Vec<String> = manifest
        .default_permissions
        .iter()
        .filter_map(|(name, want)| {
            let has = i
                .permissions
                .get(name)
                .map(String::as_str)
                .unwrap_or("none");
            (level(has) < level(want)).then(|| format!("{name}: {want} (has {has})"))
        })
        .collect();
    let permissions = if short.is_empty() {
        Finding::pass(
            "Permissions",
            format!(
                "{} permission(s) as the manifest asks",
                manifest.default_permissions.len()
            ),
        )
    } else {
        Finding::fail(
            "Permissions",
            format!("missing {}", short.join(", ")),
            format!("grant them in the App's settings ({settings}), then accept the new permissions on the installation"),
        )
    };
    let missing: Vec<&str> = manifest
        .default_events
        .iter()
        .filter(|e| !i.events.contains(e))
        .map(String::as_str)
        .collect();
    let events = if missing.is_empty() {
        Finding::pass("Events", "every event the supervisor acts on is subscribed")
    } else {
        Finding::fail(
            "Events",
            format!("not subscribed to {}", missing.join(", ")),
            format!("subscribe to them in the App's settings ({settings})"),
        )
    };
    [permissions, events]
}

/// 3. The webhook's recent deliveries, as GitHub recorded them.
async fn deliveries(t: &Target<'_>) -> Finding {
    const CHECK: &str = "Webhook deliveries";
    let r = match t.github.app_get("/app/hook/deliveries?per_page=50").await {
        Ok(r) => r,
        Err(e) => {
            return Finding::fail(
                CHECK,
                e.to_string(),
                "the App needs a webhook: set its URL and secret in the App's settings",
            )
        }
    };
    let items: Vec<serde_json::Value> = serde_json::from_str(&r.body).unwrap_or_default();
    let all: Vec<HookDelivery> = items
        .into_iter()
        .filter_map(|v| read::<HookDelivery>("a hook delivery", v).ok())
        .collect();
    let failed: Vec<&HookDelivery> = all
        .iter()
        .filter(|d| !(200..300).contains(&d.status_code))
        .collect();
    match (all.len(), failed.first()) {
        (0, _) => Finding::skipped(
            CHECK,
            "GitHub has sent none yet: comment on an issue of an installed repository to send one",
        ),
        (n, None) => Finding::pass(CHECK, format!("the last {n} were answered 2xx")),
        (n, Some(last)) => Finding::fail(
            CHECK,
            format!(
                "{} of the last {n} failed; the latest ({}, {}) got {}: {}",
                failed.len(),
                last.event,
                last.delivered_at,
                last.status_code,
                last.status
            ),
            delivery_reason(last.status_code),
        ),
    }
}

/// 5. The agent workflow on the default branch, and the inputs it declares.
async fn agent_workflow(t: &Target<'_>, repo: &Repo<'_>) -> Finding {
    let path = format!(".github/workflows/{}", super::DEFAULT_WORKFLOW);
    match repo.file(&path, None).await {
        Ok(Some((text, _))) => workflow_inputs(&text, &path),
        Ok(None) => Finding::fail(
            "Agent workflow",
            format!("{path} is not on the default branch"),
            format!(
                "`supervise setup --repo {}` opens a pull request adding it; merge it",
                t.repo
            ),
        ),
        Err(e) => Finding::fail(
            "Agent workflow",
            e.to_string(),
            "the installation needs contents: read",
        ),
    }
}

/// 6. A model provider's key among the repository's secrets (names only);
///    with them, the names, when the App may read them.
async fn secrets(t: &Target<'_>, installation: u64) -> (Finding, Option<Vec<String>>) {
    const CHECK: &str = "Secrets";
    let mut names = None;
    let found = match t
        .github
        .get(installation, &format!("/repos/{}/actions/secrets", t.repo))
        .await
    {
        Ok(r) => match serde_json::from_str(&r.body)
            .map_err(|e| e.to_string())
            .and_then(|v| read::<SecretNames>("GET secrets", v).map_err(|e| e.to_string()))
        {
            Ok(s)
                if s.secrets
                    .iter()
                    .any(|x| PROVIDER_SECRETS.contains(&x.name.as_str())) =>
            {
                names = Some(s.secrets.iter().map(|x| x.name.clone()).collect());
                Finding::pass(CHECK, "a model provider's key is set for the agents")
            }
            Ok(s) => {
                names = Some(s.secrets.iter().map(|x| x.name.clone()).collect());
                Finding::fail(
                CHECK,
                format!("none of {} is set", PROVIDER_SECRETS.join(", ")),
                format!(
                    "add your model provider's key as a repository secret: {}/{}/settings/secrets/actions",
                    t.web_url, t.repo
                ),
                )
            }
            Err(e) => Finding::fail(CHECK, e, "report this answer"),
        },
        Err(GitHubError::Http { status: 403, .. }) => Finding::skipped(
            CHECK,
            "the App may not read secret names (grant `secrets: read` to check them)",
        ),
        Err(e) => Finding::fail(CHECK, e.to_string(), "check the installation's permissions"),
    };
    (found, names)
}

/// 7. The plan on the default branch reads.
async fn plan(t: &Target<'_>, repo: &Repo<'_>) -> Finding {
    match repo.file(t.plan, None).await {
        Ok(Some((text, _))) => plan_read(&text, t.plan, t.plan),
        Ok(None) => Finding::skipped(
            "Plan",
            format!(
                "no {} on the default branch (work without a plan needs none)",
                t.plan
            ),
        ),
        Err(e) => Finding::fail(
            "Plan",
            e.to_string(),
            "the installation needs contents: read",
        ),
    }
}

/// The plan `text` (at `path`, said as `shown`) as the reader reads it.
fn plan_read(text: &str, path: &str, shown: &str) -> Finding {
    match crate::plan::parse(text, path) {
        Ok(p) => Finding::pass(
            "Plan",
            format!(
                "{shown}: {}, {}",
                crate::text::count(p.work_units.len(), "unit"),
                crate::text::count(p.total_sprints(), "sprint")
            ),
        ),
        Err(problems) => Finding::fail(
            "Plan",
            problems
                .iter()
                .take(3)
                .map(|p| format!("{path}:{p}"))
                .collect::<Vec<_>>()
                .join("; "),
            format!("fix the plan; `supervise plan show {path}` says where, locally"),
        ),
    }
}

/// 8. The repository's settings read.
async fn settings(repo: &Repo<'_>) -> Finding {
    let file = crate::settings::REPO_FILE;
    match super::repo_settings(repo, None).await {
        Ok(Ok(_)) => Finding::pass(
            "Settings",
            format!("{file} is valid (or absent: the defaults)"),
        ),
        Ok(Err(e)) => Finding::fail(
            "Settings",
            e,
            format!("fix {file}; the schema is schema/supervise.schema.json"),
        ),
        Err(e) => Finding::fail(
            "Settings",
            e.to_string(),
            "the installation needs contents: read",
        ),
    }
}

/// Whether the agent workflow declares every input this version sends.
fn workflow_inputs(text: &str, path: &str) -> Finding {
    let v: serde_yaml::Value = match serde_yaml::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Finding::fail(
                "Agent workflow",
                format!("{path} is not YAML: {e}"),
                format!("replace {path} with this version's"),
            )
        }
    };
    // YAML reads a bare `on` as the boolean true.
    let on = v.get("on").or_else(|| v.get(serde_yaml::Value::Bool(true)));
    let inputs = on
        .and_then(|o| o.get("workflow_dispatch"))
        .and_then(|d| d.get("inputs"));
    let missing: Vec<&str> = AGENT_WORKFLOW_INPUTS
        .iter()
        .copied()
        .filter(|i| inputs.and_then(|m| m.get(*i)).is_none())
        .collect();
    if missing.is_empty() {
        Finding::pass(
            "Agent workflow",
            format!("{path} takes every input this version sends"),
        )
    } else {
        Finding::fail(
            "Agent workflow",
            format!("{path} is older than this supervisor: it lacks the input(s) {}", missing.join(", ")),
            format!("replace {path} with this version's: `supervise setup --repo <owner/name>` opens a pull request with it (GitHub refuses a dispatch with inputs a workflow does not declare)"),
        )
    }
}

/// The service's own word: `GET {url}/readyz`.
async fn ready(url: &str) -> Finding {
    let target = format!("{}/readyz", url.trim_end_matches('/'));
    let Some(rest) = target.strip_prefix("http://") else {
        return Finding::skipped(
            "Service",
            format!("{target}: only http:// is asked here; check https yourself with curl"),
        );
    };
    let (host, path) = rest
        .split_once('/')
        .map(|(h, p)| (h.to_string(), format!("/{p}")))
        .unwrap_or((rest.to_string(), "/".into()));
    let asked = async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(&host).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&buf).to_string())
    };
    match tokio::time::timeout(std::time::Duration::from_secs(5), asked).await {
        Ok(Ok(text)) if text.split_whitespace().nth(1) == Some("200") => {
            Finding::pass("Service", format!("{target} says ready"))
        }
        Ok(Ok(text)) => Finding::fail(
            "Service",
            format!(
                "{target}: {}",
                text.split("\r\n\r\n").nth(1).unwrap_or("").trim()
            ),
            "see the service's log; /readyz names what is wrong",
        ),
        Ok(Err(e)) => Finding::fail(
            "Service",
            format!("{target}: {e}"),
            "start `supervise serve`, or check the address",
        ),
        Err(_) => Finding::fail(
            "Service",
            format!("{target}: no answer in 5 s"),
            "check the address and that the service runs",
        ),
    }
}

/// The findings for a terminal.
pub fn render(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        let mark = match f.verdict {
            Verdict::Pass => "✓",
            Verdict::Fail => "✗",
            Verdict::Skipped => "–",
        };
        out.push_str(&format!("{mark} {}: {}\n", f.check, f.detail));
        if let Some(fix) = &f.fix {
            out.push_str(&format!("    → {fix}\n"));
        }
    }
    let failed = findings
        .iter()
        .filter(|f| f.verdict == Verdict::Fail)
        .count();
    out.push_str(&match failed {
        0 => "\nEverything a first operation needs is in place: comment `/supervise start` on an issue.\n".to_string(),
        n => format!(
            "\n{} failed; fix {} and run `supervise doctor` again.\n",
            crate::text::count(n, "check"),
            if n == 1 { "it" } else { "them" }
        ),
    });
    out
}
