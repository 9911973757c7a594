//! The shipped agent workflow (`.github/workflows/supervise-agent.yml`) on
//! the fake's runner: each job gets the credentials and the condition its
//! YAML grants ([`grants`]), so a change to the YAML is a change to what
//! the tests cross; a job's steps are stood in by one script per job
//! (`gh-<job>-job.sh`, in the directory given), which runs what the
//! job's steps run.

use crate::{Access, Job, RunsIf};
use std::path::Path;

/// What a workflow's YAML grants each job, in its order: whether its
/// credentials can write (`permissions: contents: write` *and* a checkout
/// that keeps its credential — `persist-credentials` not `false`), and
/// whether it runs only when the job before it succeeded (an `if:` on a
/// needed job's `result == 'success'`).
pub fn grants(yaml: &str) -> Result<Vec<(String, Access, RunsIf)>, String> {
    let doc: serde_yaml::Value = serde_yaml::from_str(yaml)
        .map_err(|e| format!("the workflow does not read as YAML: {e}"))?;
    let jobs = doc["jobs"].as_mapping().ok_or("the workflow has no jobs")?;
    Ok(jobs
        .iter()
        .map(|(name, job)| {
            let contents = job["permissions"]["contents"]
                .as_str()
                .or_else(|| doc["permissions"]["contents"].as_str())
                .unwrap_or("none");
            let persists = job["steps"]
                .as_sequence()
                .into_iter()
                .flatten()
                .find(|step| {
                    step["uses"]
                        .as_str()
                        .is_some_and(|u| u.starts_with("actions/checkout@"))
                })
                .is_some_and(|checkout| {
                    let persist = &checkout["with"]["persist-credentials"];
                    !(persist.as_bool() == Some(false) || persist.as_str() == Some("false"))
                });
            let access = if contents == "write" && persists {
                Access::Write
            } else {
                Access::Read
            };
            let condition = job["if"].as_str().unwrap_or("");
            let runs_if = if condition.contains("needs.") && condition.contains("== 'success'") {
                RunsIf::PreviousSucceeded
            } else {
                RunsIf::NotCancelled
            };
            (name.as_str().unwrap_or("").to_string(), access, runs_if)
        })
        .collect())
}

/// The agent workflow `yaml`'s three jobs: the agent's (`agent_env` holds
/// the agent command as `AGENT` and its keys; `supervise` is the release
/// it installs), the verifying job (the trusted `supervise`; its scan step
/// is given the model keys the agent's job holds, as the YAML gives
/// `secrets.*`) and the publishing job.
pub fn jobs(
    yaml: &str,
    scripts: &Path,
    supervise: &str,
    agent_env: Vec<(String, String)>,
) -> Result<Vec<Job>, String> {
    let grants = grants(yaml)?;
    let names: Vec<&str> = grants.iter().map(|g| g.0.as_str()).collect();
    if names != ["agent", "verify", "publish"] {
        return Err(format!(
            "the agent workflow's jobs are {names:?}, not agent, verify and publish"
        ));
    }
    let keys: Vec<&str> = agent_env
        .iter()
        .filter(|(k, _)| k.ends_with("_API_KEY"))
        .map(|(_, v)| v.as_str())
        .collect();
    let verify_env = vec![
        ("SUPERVISE_BIN".to_string(), supervise.to_string()),
        ("SCAN_SECRETS".to_string(), keys.join("\n")),
    ];
    let mut agent_env = agent_env;
    agent_env.push(("SUPERVISE_INSTALL_FROM".into(), supervise.into()));
    let publish_env = vec![("SUPERVISE_BIN".to_string(), supervise.to_string())];
    let mut envs = [agent_env, verify_env, publish_env].into_iter();
    Ok(grants
        .into_iter()
        .map(|(name, access, runs_if)| Job {
            command: format!("sh {}", scripts.join(format!("gh-{name}-job.sh")).display()),
            env: envs.next().unwrap_or_default(),
            name,
            access,
            runs_if,
        })
        .collect())
}
