//! Running a [`Planned`] workflow on the fake's runner: its jobs in order,
//! each in a directory of its own with a fresh clean environment, its steps
//! one process group each (so a cancel reaches the step running).
//!
//! The actions a step `uses:` are stood in by local equivalents, each
//! small and named here:
//! - `actions/checkout`: a clone of the repository at `with.ref`; its
//!   `origin` takes pushes only when the job's `permissions` grant
//!   `contents: write` *and* `persist-credentials` is not `false`;
//! - `actions/upload-artifact` / `actions/download-artifact`: a directory
//!   per artifact name, shared by the run's jobs (uploading a name twice
//!   fails, as GitHub's v4 does);
//! - `actions/create-github-app-token`: an installation token of the App,
//!   given an `app-id` and a `private-key`.
//!
//! Anything else a step uses fails the step, saying so.

use super::expr::{self, Value};
use super::{tools, Does, JobSpec, Planned, StepSpec};
use crate::api::actions::{copy_dir, is_cancelled, run_process};
use crate::git::Repo;
use crate::{Run, Shared};
use std::collections::BTreeMap;
use std::path::Path;

/// What an expression can see at one point of a job.
struct Scope<'a> {
    inputs: &'a BTreeMap<String, String>,
    planned: &'a Planned,
    env: BTreeMap<String, String>,
    steps: BTreeMap<String, Done>,
    needs: BTreeMap<String, String>,
    github: BTreeMap<String, String>,
    runner_temp: String,
    cancelled: bool,
    /// A step before failed (at job level: a needed job did not succeed).
    failed: bool,
}

/// What a step that ran leaves: its outputs, and the environment it set
/// for the steps after it.
type Left = (BTreeMap<String, String>, Vec<(String, String)>);

/// A step that ran (or was skipped).
struct Done {
    outputs: BTreeMap<String, String>,
    outcome: &'static str,
}

fn get(map: &BTreeMap<String, String>, key: &str) -> Value {
    map.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map_or(Value::Null, |(_, v)| Value::Str(v.clone()))
}

impl expr::Context for Scope<'_> {
    fn lookup(&self, path: &[&str]) -> Value {
        let context = path
            .first()
            .map(|c| c.to_ascii_lowercase())
            .unwrap_or_default();
        match (context.as_str(), &path[1..]) {
            ("inputs", [k]) => get(self.inputs, k),
            ("vars", [k]) => get(&self.planned.setup.vars, k),
            // An unset secret reads as the empty string.
            ("secrets", [k]) => match get(&self.planned.setup.secrets, k) {
                Value::Null => Value::Str(String::new()),
                v => v,
            },
            ("env", [k]) => get(&self.env, k),
            ("steps", [id, rest @ ..]) => match (self.steps.get(*id), rest) {
                (Some(s), ["outputs", k]) => get(&s.outputs, k),
                (Some(s), ["outcome"] | ["conclusion"]) => Value::Str(s.outcome.into()),
                _ => Value::Null,
            },
            ("needs", [job, "result"]) => self
                .needs
                .get(*job)
                .map_or(Value::Null, |r| Value::Str(r.clone())),
            ("github", [k]) => get(&self.github, k),
            ("runner", ["temp"]) => Value::Str(self.runner_temp.clone()),
            ("runner", ["os"]) => Value::Str("Linux".into()),
            _ => Value::Null,
        }
    }

    fn status(&self, function: &str) -> Option<bool> {
        match function {
            "success" => Some(!self.failed && !self.cancelled),
            "failure" => Some(self.failed),
            "cancelled" => Some(self.cancelled),
            "always" => Some(true),
            _ => None,
        }
    }
}

fn with_defaults(planned: &Planned, inputs: &[(String, String)]) -> BTreeMap<String, String> {
    let mut all: BTreeMap<String, String> = planned.workflow.defaults.iter().cloned().collect();
    all.extend(inputs.iter().cloned());
    all
}

impl Planned {
    /// The run's title, from the workflow's `run-name` (inputs only, as on
    /// GitHub); `None` without one.
    pub(crate) fn title(&self, inputs: &[(String, String)]) -> Option<String> {
        let inputs = with_defaults(self, inputs);
        let scope = Scope {
            inputs: &inputs,
            planned: self,
            env: BTreeMap::new(),
            steps: BTreeMap::new(),
            needs: BTreeMap::new(),
            github: BTreeMap::new(),
            runner_temp: String::new(),
            cancelled: false,
            failed: false,
        };
        let name = self.workflow.run_name.as_deref()?;
        expr::interpolate(name, &scope).ok()
    }
}

/// Runs every job; whether none failed.
pub(crate) async fn run_jobs(
    f: &Shared,
    run: &Run,
    repo: &Repo,
    planned: &Planned,
    inputs: &[(String, String)],
    runner: &Path,
    started: &mut bool,
) -> bool {
    let inputs = with_defaults(planned, inputs);
    let artifacts = runner.join("artifacts");
    if let Err(e) = std::fs::create_dir_all(&artifacts) {
        eprintln!("fake-github: run {}: {e}", run.id);
        return false;
    }
    let mut results: BTreeMap<String, String> = BTreeMap::new();
    for job in &planned.workflow.jobs {
        let on = Runner {
            f,
            run,
            repo,
            planned,
            inputs: &inputs,
            home: runner.join(&job.name),
            artifacts: &artifacts,
        };
        let result = match on.job(job, &results, started).await {
            Ok(result) => result,
            Err(why) => {
                eprintln!("fake-github: run {} job `{}`: {why}", run.id, job.name);
                "failure"
            }
        };
        results.insert(job.name.clone(), result.to_string());
    }
    !results.values().any(|r| r == "failure")
}

/// One job's runner.
struct Runner<'a> {
    f: &'a Shared,
    run: &'a Run,
    repo: &'a Repo,
    planned: &'a Planned,
    inputs: &'a BTreeMap<String, String>,
    home: std::path::PathBuf,
    artifacts: &'a Path,
}

impl Runner<'_> {
    /// The job's result: `success`, `failure`, `cancelled` or `skipped`.
    async fn job(
        &self,
        job: &JobSpec,
        results: &BTreeMap<String, String>,
        started: &mut bool,
    ) -> Result<&'static str, String> {
        let needs: BTreeMap<String, String> = job
            .needs
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    results.get(n).cloned().unwrap_or_else(|| "skipped".into()),
                )
            })
            .collect();
        let name = self.run.repo.rsplit('/').next().unwrap_or("repo");
        let workspace = self.home.join("work").join(name);
        let temp = self.home.join("temp");
        let mut scope = Scope {
            inputs: self.inputs,
            planned: self.planned,
            env: BTreeMap::new(),
            steps: BTreeMap::new(),
            failed: needs.values().any(|r| r != "success"),
            needs,
            github: BTreeMap::from([
                ("sha".to_string(), self.run.head_sha.clone()),
                ("ref_name".to_string(), self.run.head_branch.clone()),
                ("repository".to_string(), self.run.repo.clone()),
                ("run_id".to_string(), self.run.id.to_string()),
                ("event_name".to_string(), "workflow_dispatch".to_string()),
                ("workspace".to_string(), workspace.display().to_string()),
                (
                    "token".to_string(),
                    self.f.mint_workflow_token(job.contents_write),
                ),
            ]),
            runner_temp: temp.display().to_string(),
            cancelled: is_cancelled(self.f, self.run),
        };
        if !expr::condition(job.condition.as_deref(), &scope)? {
            return Ok("skipped");
        }
        scope.failed = false;
        let bin = self.home.join("tools/bin");
        let npm_bin = self.home.join("tools/npm/bin");
        for d in [&workspace, &temp, &self.home.join("files")] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        tools::install(&self.planned.setup, &bin, &npm_bin)?;
        for (k, v) in self.planned.workflow.env.iter().chain(&job.env) {
            let value = expr::interpolate(v, &scope)?;
            scope.env.insert(k.clone(), value);
        }
        let before = self.repo.branches();
        let mut paths: Vec<String> = Vec::new();
        for (n, step) in job.steps.iter().enumerate() {
            scope.cancelled = is_cancelled(self.f, self.run);
            let done = match expr::condition(step.condition.as_deref(), &scope) {
                Ok(false) => Done {
                    outputs: BTreeMap::new(),
                    outcome: "skipped",
                },
                Ok(true) => {
                    let ran = match &step.does {
                        Does::Run(script) => {
                            let step_env = self.step_env(step, &scope)?;
                            let script = expr::interpolate(script, &scope)?;
                            let dirs = (&workspace, &temp, bin.as_path(), npm_bin.as_path());
                            self.script(n, &script, step_env, &scope, dirs, &mut paths, started)
                                .await
                        }
                        Does::Uses { action, with } => {
                            let mut given = BTreeMap::new();
                            for (k, v) in with {
                                given.insert(k.clone(), expr::interpolate(v, &scope)?);
                            }
                            self.uses(job, action, &given, &workspace)
                        }
                    };
                    match ran {
                        Ok((outputs, env)) => {
                            scope.env.extend(env);
                            Done {
                                outputs,
                                outcome: "success",
                            }
                        }
                        Err(why) => {
                            eprintln!(
                                "fake-github: run {} job `{}` step `{}` failed: {why}",
                                self.run.id, job.name, step.name
                            );
                            scope.failed = true;
                            Done {
                                outputs: BTreeMap::new(),
                                outcome: "failure",
                            }
                        }
                    }
                }
                Err(why) => return Err(format!("step `{}`: {why}", step.name)),
            };
            if let Some(id) = &step.id {
                scope.steps.insert(id.clone(), done);
            }
        }
        // Every branch the job moved, as pushes: CI starts on each.
        for (branch, sha) in self.repo.branches() {
            if !before.iter().any(|(b, s)| *b == branch && *s == sha) {
                self.f.on_push(&self.run.repo, &sha);
            }
        }
        let _ = std::fs::remove_dir_all(&self.home);
        Ok(if is_cancelled(self.f, self.run) {
            "cancelled"
        } else if scope.failed {
            "failure"
        } else {
            "success"
        })
    }

    fn step_env(&self, step: &StepSpec, scope: &Scope) -> Result<Vec<(String, String)>, String> {
        step.env
            .iter()
            .map(|(k, v)| Ok((k.clone(), expr::interpolate(v, scope)?)))
            .collect()
    }

    /// A `run:` step through `bash -e`, as GitHub's default shell on Linux:
    /// its outputs and the environment it set for the steps after it.
    #[allow(clippy::too_many_arguments)]
    async fn script(
        &self,
        n: usize,
        script: &str,
        step_env: Vec<(String, String)>,
        scope: &Scope<'_>,
        (workspace, temp, bin, npm_bin): (&std::path::PathBuf, &std::path::PathBuf, &Path, &Path),
        paths: &mut Vec<String>,
        started: &mut bool,
    ) -> Result<Left, String> {
        let files = self.home.join("files");
        let file = files.join(format!("step-{n}.sh"));
        let env_file = files.join(format!("env-{n}"));
        let output_file = files.join(format!("output-{n}"));
        let path_file = files.join(format!("path-{n}"));
        for (f, text) in [
            (&file, script),
            (&env_file, ""),
            (&output_file, ""),
            (&path_file, ""),
        ] {
            std::fs::write(f, text).map_err(|e| format!("{}: {e}", f.display()))?;
        }
        let mut path: Vec<String> = paths.iter().rev().cloned().collect();
        path.push(bin.display().to_string());
        path.push(npm_bin.display().to_string());
        if let Some(system) = std::env::var_os("PATH") {
            path.push(system.to_string_lossy().into_owned());
        }
        let mut cmd = tokio::process::Command::new("bash");
        cmd.env_clear();
        if let Some(lang) = std::env::var_os("LANG") {
            cmd.env("LANG", lang);
        }
        let github = |k: &str| scope.github.get(k).cloned().unwrap_or_default();
        cmd.arg("-e")
            .arg(&file)
            .current_dir(workspace)
            .env("PATH", path.join(":"))
            .env("HOME", &self.home)
            .env("CI", "true")
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_WORKSPACE", workspace)
            .env("GITHUB_SHA", github("sha"))
            .env("GITHUB_REF_NAME", github("ref_name"))
            .env("GITHUB_REPOSITORY", github("repository"))
            .env("GITHUB_RUN_ID", github("run_id"))
            .env("GITHUB_EVENT_NAME", "workflow_dispatch")
            .env("GITHUB_API_URL", self.f.url())
            .env("RUNNER_TEMP", temp)
            .env("RUNNER_OS", "Linux")
            .env("RUNNER_ENVIRONMENT", "github-hosted")
            .env("GITHUB_ENV", &env_file)
            .env("GITHUB_OUTPUT", &output_file)
            .env("GITHUB_PATH", &path_file)
            .envs(&scope.env)
            .envs(step_env)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.home.join("log"))
            .map_err(|e| e.to_string())?;
        cmd.stdout(std::process::Stdio::from(log));
        let ok = run_process(self.f, self.run, cmd, started).await?;
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        paths.extend(
            read(&path_file)
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_string),
        );
        if !ok {
            return Err("exited non-zero".into());
        }
        Ok((
            assignments(&read(&output_file)).into_iter().collect(),
            assignments(&read(&env_file)),
        ))
    }

    /// A step that `uses:` an action: its stand-in (see the module's doc).
    fn uses(
        &self,
        job: &JobSpec,
        action: &str,
        with: &BTreeMap<String, String>,
        workspace: &Path,
    ) -> Result<Left, String> {
        let given = |k: &str| with.get(k).cloned().unwrap_or_default();
        let mut outputs = BTreeMap::new();
        match action.split('@').next().unwrap_or(action) {
            "actions/checkout" => {
                let rev = Some(given("ref"))
                    .filter(|r| !r.is_empty())
                    .unwrap_or_else(|| self.run.head_sha.clone());
                self.repo.checkout(&rev, workspace)?;
                let persists = given("persist-credentials") != "false";
                if !(job.contents_write && persists) {
                    // No write credential in this checkout: the remote's
                    // branches are known, but nothing can be pushed there.
                    let (o, r) = self.run.repo.split_once('/').unwrap_or(("o", "r"));
                    let nowhere = format!("https://fake-github.invalid/{o}/{r}.git");
                    crate::git::git(workspace, &["remote", "set-url", "origin", &nowhere])?;
                }
            }
            "actions/upload-artifact" => {
                let name = Some(given("name")).filter(|n| !n.is_empty()).unwrap_or("artifact".into());
                let to = self.artifacts.join(&name);
                if to.exists() {
                    return Err(format!("an artifact named `{name}` already exists in this run"));
                }
                let from = std::path::PathBuf::from(given("path"));
                let empty = std::fs::read_dir(&from).map(|mut d| d.next().is_none()).unwrap_or(!from.is_file());
                if empty {
                    if given("if-no-files-found") == "error" {
                        return Err(format!("no files were found at {}", from.display()));
                    }
                } else if from.is_dir() {
                    copy_dir(&from, &to).map_err(|e| e.to_string())?;
                } else {
                    std::fs::create_dir_all(&to).map_err(|e| e.to_string())?;
                    let file = from.file_name().ok_or("an artifact path without a name")?;
                    std::fs::copy(&from, to.join(file)).map_err(|e| e.to_string())?;
                }
            }
            "actions/download-artifact" => {
                let name = given("name");
                let from = self.artifacts.join(&name);
                if !from.is_dir() {
                    return Err(format!("artifact `{name}` not found in this run"));
                }
                let to = Some(given("path"))
                    .filter(|p| !p.is_empty())
                    .map_or_else(|| workspace.to_path_buf(), std::path::PathBuf::from);
                copy_dir(&from, &to).map_err(|e| e.to_string())?;
            }
            "actions/create-github-app-token" => {
                if given("app-id").is_empty() || given("private-key").is_empty() {
                    return Err("`app-id` and `private-key` are required".into());
                }
                outputs.insert("token".to_string(), self.f.mint_installation_token());
            }
            other => {
                return Err(format!(
                    "the fake's runner has no stand-in for `{other}` (see fake-github/src/workflow/run.rs)"
                ))
            }
        }
        Ok((outputs, Vec::new()))
    }
}

/// `GITHUB_OUTPUT` / `GITHUB_ENV` lines: `name=value`, or `name<<DELIMITER`
/// followed by the value's lines and the delimiter.
fn assignments(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        match (line.split_once("<<"), line.split_once('=')) {
            (Some((name, delimiter)), eq) if eq.is_none_or(|(n, _)| n.len() > name.len()) => {
                let value: Vec<&str> = lines.by_ref().take_while(|l| *l != delimiter).collect();
                out.push((name.to_string(), value.join("\n")));
            }
            (_, Some((name, value))) => out.push((name.to_string(), value.to_string())),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn step_outputs_read_as_the_runner_writes_them() {
        let text = "code=0\nbody<<EOF\nline 1\nline=2\nEOF\nempty=\n";
        assert_eq!(
            super::assignments(text),
            [
                ("code".to_string(), "0".to_string()),
                ("body".to_string(), "line 1\nline=2".to_string()),
                ("empty".to_string(), String::new()),
            ]
        );
    }
}
