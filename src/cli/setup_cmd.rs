//! `supervise setup`: a GitHub App for the service in one click, by GitHub's
//! manifest flow. A page on 127.0.0.1 posts `deploy/app-manifest.json` (with
//! the webhook URL given) to GitHub; GitHub creates the App once the person
//! confirms and sends the browser back here with a code; the code is traded
//! for the App's credentials, which are written where `supervise serve`
//! reads them — `supervise.env` and the key file, both mode 0600, never
//! printed — and the next steps are said: install the App, run `doctor`.

use crate::github::manifest::{convert, NewApp};
use crate::github::repo::Repo;
use crate::github::GitHub;
use crate::place::hosted::doctor::MANIFEST;
use crate::place::hosted::starter::{self, Starter};
use crate::report::web::escape;
use anyhow::{anyhow, Context, Result};
use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use clap::Args;
use secrecy::ExposeSecret;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Args)]
pub struct SetupArgs {
    /// Where GitHub will deliver webhooks: the service's `/webhook` as GitHub
    /// reaches it (`https://supervise.example.com/webhook`).
    #[arg(long, required_unless_present = "repo")]
    pub webhook_url: Option<String>,
    /// Once the App is installed: propose the agent workflow and a starter
    /// `.github/supervise.yml` to this repository (`owner/name`) in a pull
    /// request, with the App's credentials as `serve` reads them.
    #[arg(long, requires = "app_id", value_parser = super::repo_arg)]
    pub repo: Option<String>,
    /// The App's id, for `--repo` (its key from GITHUB_PRIVATE_KEY or
    /// GITHUB_PRIVATE_KEY_PATH).
    #[arg(long, env = "GITHUB_APP_ID")]
    pub app_id: Option<u64>,
    /// Create the App for this organisation (default: your personal account).
    #[arg(long)]
    pub org: Option<String>,
    /// GitHub's address (GitHub Enterprise Server: yours).
    #[arg(long, default_value = "https://github.com")]
    pub github_url: String,
    /// The REST API (default: api.github.com, or `<github-url>/api/v3`).
    #[arg(long, env = "GITHUB_API_URL")]
    pub api_url: Option<String>,
    /// The service's address as browsers reach it: the web view's sign-in
    /// comes back to `<public-url>/login/callback`.
    #[arg(long)]
    pub public_url: Option<String>,
    /// Where `supervise.env` and `supervise-app.pem` are written.
    #[arg(long, default_value = ".")]
    pub out_dir: PathBuf,
    /// The port of the one-button page on 127.0.0.1 (0: any free one).
    #[arg(long, default_value_t = 8322)]
    pub port: u16,
    /// Replace an existing supervise.env and key file.
    #[arg(long)]
    pub force: bool,
}

struct Flow {
    args: SetupArgs,
    api_url: String,
    state: String,
    redirect: String,
    done: Mutex<Option<tokio::sync::oneshot::Sender<Result<NewApp, String>>>>,
}

fn api_url(args: &SetupArgs) -> String {
    match &args.api_url {
        Some(a) => a.trim_end_matches('/').to_string(),
        None if args.github_url.trim_end_matches('/') == "https://github.com" => {
            "https://api.github.com".into()
        }
        None => format!("{}/api/v3", args.github_url.trim_end_matches('/')),
    }
}

/// The manifest GitHub is sent: the project's, with this service's URLs.
fn manifest(args: &SetupArgs, webhook_url: &str, redirect: &str) -> String {
    let mut m: serde_json::Value = serde_json::from_str(MANIFEST).expect("the manifest is JSON");
    m["hook_attributes"]["url"] = webhook_url.into();
    m["redirect_url"] = redirect.into();
    if let Some(p) = &args.public_url {
        m["callback_urls"] =
            serde_json::json!([format!("{}/login/callback", p.trim_end_matches('/'))]);
        m["request_oauth_on_install"] = false.into();
    }
    m.to_string()
}

pub fn run(args: SetupArgs) -> Result<i32> {
    if let (Some(repo), Some(app_id)) = (&args.repo, args.app_id) {
        return propose(&args, repo, app_id);
    }
    let webhook_url = args.webhook_url.clone().unwrap_or_default();
    let env = args.out_dir.join("supervise.env");
    let key = args.out_dir.join("supervise-app.pem");
    if !args.force {
        if let Some(p) = [&env, &key].into_iter().find(|p| p.exists()) {
            return Err(anyhow!(
                "{} already exists; nothing was done. Pass --force to replace it (the App it names stays on GitHub).",
                p.display()
            ));
        }
    }
    if !webhook_url.starts_with("https://") && !webhook_url.starts_with("http://") {
        return Err(anyhow!(
            "--webhook-url `{webhook_url}` is not a URL: give the service's /webhook as GitHub reaches it, e.g. https://supervise.example.com/webhook"
        ));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let (listener, addr) = super::loopback(args.port).await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let flow = Arc::new(Flow {
            api_url: api_url(&args),
            state: crate::server::web::session::random_hex(16),
            redirect: format!("http://{addr}/callback"),
            args: args.clone(),
            done: Mutex::new(Some(tx)),
        });
        println!("Open http://{addr}/ in a browser signed in to GitHub and press the button: GitHub creates the App and sends you back here.");
        let app = Router::new()
            .route("/", get(start_page))
            .route("/callback", get(callback))
            .with_state(flow.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let made = rx.await.map_err(|_| anyhow!("the setup page stopped"))?;
        // Let the browser get its last page.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        server.abort();
        let new = made.map_err(|e| anyhow!(e))?;
        write_credentials(&args, &flow.api_url, &new, &env, &key)?;
        println!(
            "The App {} (id {}) is created. Its credentials are in {} and {} (readable by you only).\nNext:\n  1. Install it on your repositories: {}/installations/new\n  2. Load its credentials: `set -a; . {}; set +a`\n  3. Propose the agent workflow and starter settings to a repository (a pull request, never a push): `supervise setup --repo owner/name`\n  4. Start the service: `supervise serve`\n  5. Check everything: `supervise doctor --repo owner/name`",
            new.name,
            new.id,
            env.display(),
            key.display(),
            new.html_url.trim_end_matches('/'),
            env.display()
        );
        Ok(0)
    })
}

async fn start_page(State(flow): State<Arc<Flow>>) -> Response {
    let base = flow.args.github_url.trim_end_matches('/');
    let target = match &flow.args.org {
        Some(org) => format!(
            "{base}/organizations/{org}/settings/apps/new?state={}",
            flow.state
        ),
        None => format!("{base}/settings/apps/new?state={}", flow.state),
    };
    Html(format!(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Create the Sprint Supervisor App</title></head><body><main><h1>Create the Sprint Supervisor App</h1><p>GitHub will show the App it is about to create — its permissions, its events, and webhooks to <code>{hook}</code> — for {owner}. Nothing is created until you confirm there.</p><form method="post" action="{target}"><input type="hidden" name="manifest" value="{manifest}"><button id="create" type="submit">Create the App on GitHub</button></form></main></body></html>"#,
        hook = escape(flow.args.webhook_url.as_deref().unwrap_or_default()),
        owner = escape(flow.args.org.as_deref().unwrap_or("your account")),
        target = escape(&target),
        manifest = escape(&manifest(&flow.args, flow.args.webhook_url.as_deref().unwrap_or_default(), &flow.redirect)),
    ))
    .into_response()
}

#[derive(serde::Deserialize)]
struct Back {
    code: Option<String>,
    state: Option<String>,
}

async fn callback(State(flow): State<Arc<Flow>>, Query(b): Query<Back>) -> Response {
    if b.state.as_deref() != Some(flow.state.as_str()) {
        return Html("<p>This answer is not for this setup page (its state differs). Start again from the page <code>supervise setup</code> printed.</p>").into_response();
    }
    let Some(code) = b.code else {
        return Html("<p>GitHub sent no code. Start again.</p>").into_response();
    };
    let result = convert(&flow.api_url, &code)
        .await
        .map_err(|e| e.to_string());
    let page = match &result {
        Ok(app) => format!(
            "<p>The App <strong>{}</strong> is created; its credentials are written beside where you ran <code>supervise setup</code>. Next, <a href=\"{}/installations/new\">install it on your repositories</a>.</p>",
            escape(&app.name),
            escape(app.html_url.trim_end_matches('/'))
        ),
        Err(e) => format!("<p>GitHub did not give the App's credentials: {}</p>", escape(e)),
    };
    if let Some(tx) = flow.done.lock().ok().and_then(|mut d| d.take()) {
        let _ = tx.send(result);
    }
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Sprint Supervisor setup</title></head><body><main id=\"done\"><h1>Setup</h1>{page}</main></body></html>"
    ))
    .into_response()
}

/// Writes a file readable by its owner only, whole or not at all.
fn write_private(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("partial");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn write_credentials(
    args: &SetupArgs,
    api: &str,
    app: &NewApp,
    env: &Path,
    key: &Path,
) -> Result<()> {
    std::fs::create_dir_all(&args.out_dir)?;
    write_private(key, app.pem.expose_secret())?;
    let key_path = std::fs::canonicalize(key).unwrap_or_else(|_| key.to_path_buf());
    let mut text = format!(
        "# Written by `supervise setup` for the App {} (id {}).\nGITHUB_APP_ID={}\nGITHUB_PRIVATE_KEY_PATH={}\n",
        app.name,
        app.id,
        app.id,
        key_path.display()
    );
    if let Some(s) = &app.webhook_secret {
        text.push_str(&format!("GITHUB_WEBHOOK_SECRET={}\n", s.expose_secret()));
    }
    text.push_str(&format!(
        "GITHUB_CLIENT_ID={}\nGITHUB_CLIENT_SECRET={}\n",
        app.client_id,
        app.client_secret.expose_secret()
    ));
    if api != "https://api.github.com" {
        text.push_str(&format!("GITHUB_API_URL={api}\n"));
    }
    if args.github_url.trim_end_matches('/') != "https://github.com" {
        text.push_str(&format!(
            "GITHUB_WEB_URL={}\n",
            args.github_url.trim_end_matches('/')
        ));
    }
    if let Some(p) = &args.public_url {
        text.push_str(&format!(
            "SUPERVISE_PUBLIC_URL={}\n",
            p.trim_end_matches('/')
        ));
    }
    write_private(env, &text)
}

/// `supervise setup --repo`: the starter pull request on an installed
/// repository, or why it cannot be opened and what to do.
fn propose(args: &SetupArgs, repo: &str, app_id: u64) -> Result<i32> {
    let key = super::secret("GITHUB_PRIVATE_KEY")?.ok_or_else(|| {
        anyhow!("set GITHUB_PRIVATE_KEY (PEM text) or GITHUB_PRIVATE_KEY_PATH, as for `supervise serve` (`set -a; . supervise.env; set +a` after setup)")
    })?;
    crate::scrub::register(&key);
    let api = api_url(args);
    let web = args.github_url.trim_end_matches('/').to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let github = GitHub::new(&api, app_id, &secrecy::SecretString::from(key))?;
        let installation = match github.repo_installation(repo).await {
            Ok(Some(i)) => i,
            Ok(None) => {
                eprintln!("The App is not installed on {repo} (or the repository does not exist). Install it, choosing {repo}: {web}/settings/installations (or the App's page, Install App), then run this again.");
                return Ok(1);
            }
            Err(e) => return Err(anyhow!("asking GitHub about the installation on {repo}: {e}")),
        };
        let r = Repo {
            gh: &github,
            installation: installation.id,
            name: repo,
        };
        match starter::open_pull(&r).await {
            Ok(Starter::InPlace) => {
                println!("{repo} already has this version's agent workflow and a .github/supervise.yml: nothing to propose. Check the rest with `supervise doctor --repo {repo}`.");
                Ok(0)
            }
            Ok(Starter::Proposed { number, files }) => {
                println!(
                    "Proposed {} to {repo} in a pull request: {web}/{repo}/pull/{number}\nReview and merge it, add the secret your agent needs (ANTHROPIC_API_KEY for Claude Code), then comment `/supervise start` on an issue.",
                    files.join(" and ")
                );
                Ok(0)
            }
            Err(crate::github::GitHubError::Http { status: 403, .. }) => {
                eprintln!("GitHub refused to write to {repo}: the installation needs contents: write and pull_requests: write (the App's manifest asks for both; accept its permissions on the installation).");
                Ok(1)
            }
            Err(e) => Err(anyhow!("proposing the starter files to {repo}: {e}")),
        }
    })
}
