//! `fake-github`: the fake alone, for trying `supervise serve` by hand.
//! Prints its address; `--help` says how to drive it.

const HELP: &str = "\
fake-github: a stand-in for GitHub's REST API, webhooks and Actions, for
trying `supervise serve` without GitHub.

Usage: fake-github [--webhook-url URL] [--secret S] [--app-id N]
                   [--public-key FILE] [--installation N] [--data-dir DIR]

  --webhook-url URL   where webhooks are delivered (the service's /webhook)
  --secret S          the webhook secret deliveries are signed with
  --app-id N          the App id whose JWTs are taken (default 1)
  --public-key FILE   the App's public key, to check its JWTs
  --installation N    the installation id (default 1)
  --data-dir DIR      where its git repositories live (default: a temporary one)
  -h, --help          this help

Control API (JSON bodies; what a test does in process, for a person with curl):
  POST /_fake/repos      {\"repo\": \"acme/shop\"}
  POST /_fake/files      {\"repo\", \"path\", \"content\"}   on the default branch
  POST /_fake/issues     {\"repo\", \"title\", \"body\", \"login\"}   -> {\"number\"}
  POST /_fake/users      {\"login\", \"role\": \"write\"|\"read\"|\"admin\"}
  POST /_fake/comments   {\"repo\", \"issue\", \"login\", \"body\"}   delivers issue_comment
  POST /_fake/workflows  {\"repo\", \"file\", \"command\", \"env\": {}}   a dispatch runs command
  POST /_fake/agent-workflow {\"repo\", \"yaml\", \"supervise\", \"agent\", \"env\": {},
                         \"install_release\", \"secrets\": {}, \"vars\": {}}
                         the agent workflow run from its YAML, as GitHub runs it; the
                         agent command plays Claude Code (the prompt on its stdin)
  POST /_fake/ci         {\"repo\", \"command\"}   the repository's CI
  POST /_fake/approvals  {\"repo\", \"pull\", \"login\"}   an approval -> {\"review_id\"}
  POST /_fake/reviews    {\"repo\", \"pull\", \"login\", \"state\": \"CHANGES_REQUESTED\", \"body\"}
                         any review, delivered as pull_request_review
  POST /_fake/edit       {\"comment_id\", \"body\"}   edits a comment, delivers issue_comment edited
  POST /_fake/faults     {\"status\", \"times\"}   the next calls fail so
  GET  /_fake/repos/OWNER/REPO   issues, comments, pulls, check runs, runs
  GET  /_fake/state      comments, reactions and the request log

The guide's \"Trying it without GitHub\" (docs/src/testing.md) plays an
operation this way.
";

const FLAGS: [&str; 6] = [
    "--webhook-url",
    "--secret",
    "--app-id",
    "--public-key",
    "--installation",
    "--data-dir",
];

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return;
    }
    let mut i = 0;
    while i < args.len() {
        if !FLAGS.contains(&args[i].as_str()) || i + 1 == args.len() {
            eprintln!(
                "fake-github: `{}` is not a flag it takes with a value; see fake-github --help",
                args[i]
            );
            std::process::exit(2);
        }
        i += 2;
    }
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let public_key = match arg("--public-key") {
        Some(path) => match std::fs::read_to_string(&path) {
            Ok(pem) => Some(pem),
            Err(e) => {
                eprintln!("fake-github: --public-key {path}: {e}");
                std::process::exit(2);
            }
        },
        None => None,
    };
    let config = fake_github::Config {
        webhook_url: arg("--webhook-url"),
        webhook_secret: arg("--secret").unwrap_or_default(),
        app_id: arg("--app-id").and_then(|s| s.parse().ok()).unwrap_or(1),
        app_public_key_pem: public_key,
        installation_id: arg("--installation")
            .and_then(|s| s.parse().ok())
            .unwrap_or(1),
        data_dir: arg("--data-dir").map(Into::into),
    };
    let fake = fake_github::start(config).await;
    println!("fake GitHub on {}", fake.url());
    tokio::signal::ctrl_c().await.ok();
}

#[cfg(test)]
mod tests {
    /// Every control route the fake serves is in `--help`: a person with
    /// curl finds `/_fake/edit` and `/_fake/reviews` there, as the rest.
    #[test]
    fn every_control_route_is_in_the_help() {
        let routes: Vec<&str> = include_str!("lib.rs")
            .lines()
            .filter_map(|l| l.trim().strip_prefix(".route(\"/_fake/"))
            .filter_map(|rest| rest.split(['"', '/']).next())
            .collect();
        assert!(routes.len() >= 10, "{routes:?}");
        for r in routes {
            assert!(
                super::HELP.contains(&format!("/_fake/{r}")),
                "/_fake/{r} is served but not in --help"
            );
        }
    }
}
