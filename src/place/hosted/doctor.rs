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
    out.push(secrets(t, i.id).await);
    out.push(plan(t, &repo).await);
    out.push(settings(&repo).await);
    out
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

/// 6. A model provider's key among the repository's secrets (names only).
async fn secrets(t: &Target<'_>, installation: u64) -> Finding {
    const CHECK: &str = "Secrets";
    match t
        .github
        .get(installation, &format!("/repos/{}/actions/secrets", t.repo))
        .await
    {
        Ok(r) => match serde_json::from_str(&r.body)
            .map_err(|e| e.to_string())
            .and_then(|v| read::<SecretNames>("GET secrets", v).map_err(|e| e.to_string()))
        {
            Ok(s) if s.secrets.iter().any(|x| PROVIDER_SECRETS.contains(&x.name.as_str())) => {
                Finding::pass(CHECK, "a model provider's key is set for the agents")
            }
            Ok(_) => Finding::fail(
                CHECK,
                format!("none of {} is set", PROVIDER_SECRETS.join(", ")),
                format!(
                    "add your model provider's key as a repository secret: {}/{}/settings/secrets/actions",
                    t.web_url, t.repo
                ),
            ),
            Err(e) => Finding::fail(CHECK, e, "report this answer"),
        },
        Err(GitHubError::Http { status: 403, .. }) => Finding::skipped(
            CHECK,
            "the App may not read secret names (grant `secrets: read` to check them)",
        ),
        Err(e) => Finding::fail(CHECK, e.to_string(), "check the installation's permissions"),
    }
}

/// 7. The plan on the default branch reads.
async fn plan(t: &Target<'_>, repo: &Repo<'_>) -> Finding {
    match repo.file(t.plan, None).await {
        Ok(Some((text, _))) => match crate::plan::parse(&text, t.plan) {
            Ok(p) => Finding::pass(
                "Plan",
                format!(
                    "{}: {}, {}",
                    t.plan,
                    crate::text::count(p.work_units.len(), "unit"),
                    crate::text::count(p.total_sprints(), "sprint")
                ),
            ),
            Err(problems) => Finding::fail(
                "Plan",
                problems
                    .iter()
                    .take(3)
                    .map(|p| format!("{}:{p}", t.plan))
                    .collect::<Vec<_>>()
                    .join("; "),
                format!(
                    "fix the plan; `supervise plan show {}` says the same locally",
                    t.plan
                ),
            ),
        },
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
