//! Workflows the fake runs from their YAML, as GitHub Actions would: jobs in
//! order of their `needs`, each job's `if:`, `permissions` and `env`, each
//! step's `if:`, `env` and `run:` script (through `bash -e`, with
//! `GITHUB_ENV`, `GITHUB_OUTPUT` and `GITHUB_PATH`), each job on a runner
//! of its own with a clean environment holding only what the YAML gives it.
//!
//! What cannot run here is stood in for, each by a small local equivalent
//! named in [`run`] (the actions a step `uses:`) and [`tools`] (the network
//! a step reaches with `curl` or `npm`). So the tests cross the shipped
//! workflow itself: a change to its YAML is a change to what they run.

pub mod expr;
pub(crate) mod run;
mod tools;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A workflow read from its YAML.
#[derive(Clone, Debug)]
pub struct Workflow {
    /// `run-name` (expressions unevaluated).
    pub(crate) run_name: Option<String>,
    /// The workflow-level `env`, in its order (expressions unevaluated).
    pub(crate) env: Vec<(String, String)>,
    /// `workflow_dispatch` inputs' defaults.
    pub(crate) defaults: Vec<(String, String)>,
    pub(crate) jobs: Vec<JobSpec>,
}

#[derive(Clone, Debug)]
pub(crate) struct JobSpec {
    pub(crate) name: String,
    pub(crate) needs: Vec<String>,
    pub(crate) condition: Option<String>,
    /// `permissions: contents: write` (the job's, else the workflow's).
    pub(crate) contents_write: bool,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) steps: Vec<StepSpec>,
}

#[derive(Clone, Debug)]
pub(crate) struct StepSpec {
    pub(crate) id: Option<String>,
    /// Its `name`, or what it runs (for messages).
    pub(crate) name: String,
    pub(crate) condition: Option<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) does: Does,
}

#[derive(Clone, Debug)]
pub(crate) enum Does {
    /// A `run:` script.
    Run(String),
    /// An action, `owner/name@ref`, with its `with:` (unevaluated).
    Uses {
        action: String,
        with: Vec<(String, String)>,
    },
}

/// What a repository gives its workflows beside their YAML: its secrets and
/// variables, and what the runner's stand-ins for the network serve.
#[derive(Clone, Debug, Default)]
pub struct Setup {
    pub secrets: BTreeMap<String, String>,
    pub vars: BTreeMap<String, String>,
    /// The `supervise` binary a release download serves (packed as a release's
    /// asset with its `SHA256SUMS`, for `scripts/install-release` to check).
    pub release: Option<PathBuf>,
    /// `scripts/install-release`, as raw.githubusercontent.com serves it.
    pub install_release: Option<PathBuf>,
    /// What `npm install -g <name>` installs, by package name.
    pub packages: BTreeMap<String, Package>,
}

/// A package `npm install -g` installs on the fake's runner.
#[derive(Clone, Debug)]
pub struct Package {
    /// Refused when the install asks for another (`None`: any).
    pub version: Option<String>,
    /// Its commands, each put on the `PATH` under its file name.
    pub commands: Vec<PathBuf>,
}

/// A workflow to run, with what its repository gives it.
#[derive(Clone, Debug)]
pub struct Planned {
    pub(crate) workflow: Workflow,
    pub(crate) setup: Setup,
}

impl Planned {
    pub fn new(yaml: &str, setup: Setup) -> Result<Self, String> {
        Ok(Planned {
            workflow: parse(yaml)?,
            setup,
        })
    }

    /// What the repository gives the workflow, to change before it is set.
    pub fn setup_mut(&mut self) -> &mut Setup {
        &mut self.setup
    }
}

/// Quotes `s` for a POSIX shell.
pub(crate) fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Writes a script the runner runs, executable.
pub(crate) fn write_executable(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

/// Writes `dir/claude`, Claude Code's command line (`claude -p PROMPT …`)
/// played by a scripted agent: `command` (through `sh -c`) with the prompt
/// on its stdin and `env` exported. What the shipped agent workflow's
/// Claude Code step runs, when the runner's `npm` installs this. A name in
/// `env` that is not a shell variable's is refused (it would be code).
pub fn scripted_claude(
    dir: &Path,
    command: &str,
    env: &[(String, String)],
) -> std::io::Result<PathBuf> {
    let variable = |k: &str| {
        k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if let Some((bad, _)) = env.iter().find(|(k, _)| !variable(k)) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("`{bad}` is not a variable name (letters, digits and _, not first a digit)"),
        ));
    }
    std::fs::create_dir_all(dir)?;
    let exports: String = env
        .iter()
        .map(|(k, v)| format!("export {k}={}\n", quoted(v)))
        .collect();
    let text = format!(
        "#!/bin/sh\n# Claude Code's command line, played by a scripted agent (the prompt on its stdin).\n\
         {exports}prompt=\nwhile [ $# -gt 0 ]; do\n  case \"$1\" in\n    \
         --model|--max-turns|--permission-mode|--allowedTools|--allowed-tools|--output-format) shift 2 ;;\n    \
         -*) shift ;;\n    *) prompt=\"$1\"; shift ;;\n  esac\ndone\n\
         prompt_file=$(mktemp -p \"${{RUNNER_TEMP:-/tmp}}\")\nprintf '%s' \"$prompt\" > \"$prompt_file\"\n\
         exec sh -c {} < \"$prompt_file\"\n",
        quoted(command)
    );
    let path = dir.join("claude");
    write_executable(&path, &text)?;
    Ok(path)
}

impl Setup {
    /// What a repository running the shipped agent workflow with Claude
    /// Code gives it: the variable choosing Claude Code, the App's
    /// credentials (so the publishing job pushes as the App, and the
    /// repository's CI runs on what it pushes), the release of `supervise`
    /// its install steps fetch, and `claude` as the package `npm` installs.
    pub fn claude_code(claude: &Path, supervise: &Path, install_release: &Path) -> Setup {
        let mut setup = Setup {
            release: Some(supervise.to_path_buf()),
            install_release: Some(install_release.to_path_buf()),
            ..Setup::default()
        };
        setup
            .vars
            .insert("SUPERVISE_AGENT".into(), "claude-code".into());
        setup.secrets.insert("SUPERVISE_APP_ID".into(), "42".into());
        setup.secrets.insert(
            "SUPERVISE_APP_PRIVATE_KEY".into(),
            "-----BEGIN PRIVATE KEY-----\n(the fake takes any)\n-----END PRIVATE KEY-----".into(),
        );
        setup.packages.insert(
            "@anthropic-ai/claude-code".into(),
            Package {
                version: None,
                commands: vec![claude.to_path_buf()],
            },
        );
        setup
    }
}

fn pairs(v: &serde_yaml::Value) -> Vec<(String, String)> {
    v.as_mapping()
        .into_iter()
        .flatten()
        .map(|(k, v)| (scalar(k), scalar(v)))
        .collect()
}

fn scalar(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        serde_yaml::Value::Number(n) => n.to_string(),
        serde_yaml::Value::Null => String::new(),
        other => serde_yaml::to_string(other).unwrap_or_default(),
    }
}

fn contents_write(permissions: &serde_yaml::Value) -> Option<bool> {
    match permissions {
        serde_yaml::Value::String(s) => Some(s == "write-all"),
        serde_yaml::Value::Mapping(_) => Some(permissions["contents"].as_str() == Some("write")),
        _ => None,
    }
}

/// Reads a workflow's YAML: what the runner needs of it, in its order.
pub fn parse(yaml: &str) -> Result<Workflow, String> {
    let doc: serde_yaml::Value = serde_yaml::from_str(yaml)
        .map_err(|e| format!("the workflow does not read as YAML: {e}"))?;
    let jobs = doc["jobs"].as_mapping().ok_or("the workflow has no jobs")?;
    let workflow_write = contents_write(&doc["permissions"]).unwrap_or(false);
    let mut specs: Vec<JobSpec> = Vec::new();
    for (name, job) in jobs {
        let name = scalar(name);
        let needs = match &job["needs"] {
            serde_yaml::Value::String(s) => vec![s.clone()],
            serde_yaml::Value::Sequence(s) => s.iter().map(scalar).collect(),
            _ => vec![],
        };
        if let Some(n) = needs.iter().find(|n| !specs.iter().any(|s| &&s.name == n)) {
            return Err(format!(
                "job `{name}` needs `{n}`, which is not a job before it (the fake runs jobs in their order)"
            ));
        }
        let steps = job["steps"]
            .as_sequence()
            .ok_or_else(|| format!("job `{name}` has no steps"))?
            .iter()
            .enumerate()
            .map(|(i, step)| {
                let does = if let Some(script) = step["run"].as_str() {
                    Does::Run(script.to_string())
                } else if let Some(action) = step["uses"].as_str() {
                    Does::Uses {
                        action: action.to_string(),
                        with: pairs(&step["with"]),
                    }
                } else {
                    return Err(format!(
                        "step {} of job `{name}` neither runs nor uses",
                        i + 1
                    ));
                };
                let label =
                    step["name"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| match &does {
                            Does::Run(s) => s.lines().next().unwrap_or("").to_string(),
                            Does::Uses { action, .. } => action.clone(),
                        });
                Ok(StepSpec {
                    id: step["id"].as_str().map(str::to_string),
                    name: label,
                    condition: step.get("if").map(scalar),
                    env: pairs(&step["env"]),
                    does,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        specs.push(JobSpec {
            contents_write: contents_write(&job["permissions"]).unwrap_or(workflow_write),
            condition: job.get("if").map(scalar),
            env: pairs(&job["env"]),
            needs,
            steps,
            name,
        });
    }
    let defaults = doc["on"]["workflow_dispatch"]["inputs"]
        .as_mapping()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.get("default").map(|d| (scalar(k), scalar(d))))
        .collect();
    Ok(Workflow {
        run_name: doc["run-name"].as_str().map(str::to_string),
        env: pairs(&doc["env"]),
        defaults,
        jobs: specs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_agent_workflow_reads_as_three_jobs_with_their_grants() {
        let yaml = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../.github/workflows/supervise-agent.yml"
        ))
        .unwrap();
        let w = parse(&yaml).unwrap();
        let jobs: Vec<(&str, bool)> = w
            .jobs
            .iter()
            .map(|j| (j.name.as_str(), j.contents_write))
            .collect();
        assert_eq!(
            jobs,
            [("agent", false), ("verify", false), ("publish", true)]
        );
        assert!(w
            .defaults
            .contains(&("plan".into(), "EXECUTION_PLAN.md".into())));
        assert_eq!(w.jobs[2].needs, ["agent", "verify"]);
        assert!(w.jobs[0]
            .steps
            .iter()
            .any(|s| s.id.as_deref() == Some("claude") && matches!(s.does, Does::Run(_))));
    }

    #[test]
    fn a_job_that_needs_a_later_one_is_refused() {
        let yaml = "jobs:\n  a:\n    needs: b\n    steps: [{run: 'true'}]\n  b:\n    steps: [{run: 'true'}]\n";
        assert!(parse(yaml).unwrap_err().contains("needs `b`"));
    }
}
