//! Actions: workflow dispatches that run a local command, runs, cancels,
//! and the `workflow_run` webhooks they deliver.

use super::{
    enter, error, now, ok, FakeGitHub, HashMap, HeaderMap, Job, Json, Path, Query, Repo, Response,
    Run, Shared, State, StatusCode, Value, Workflow,
};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

pub(super) fn run_json(run: &Run) -> Value {
    json!({
        "id": run.id, "name": run.display_title, "display_title": run.display_title,
        "status": run.status, "conclusion": run.conclusion,
        "head_branch": run.head_branch, "head_sha": run.head_sha,
        "event": "workflow_dispatch", "path": format!(".github/workflows/{}", run.workflow),
        "created_at": run.created_at,
        "html_url": format!("https://github.com/{}/actions/runs/{}", run.repo, run.id),
        // GitHub's description types these as email addresses: the fake's
        // commits are made by its own bot identity.
        "head_commit": {
            "id": run.head_sha,
            "author": {"name": "fake-github", "email": "fake-github@users.noreply.github.com"},
            "committer": {"name": "GitHub", "email": "noreply@github.com"},
        },
    })
}

#[derive(Deserialize)]
pub(super) struct DispatchBody {
    #[serde(rename = "ref")]
    reference: String,
    #[serde(default)]
    inputs: HashMap<String, Value>,
    #[serde(default)]
    return_run_details: bool,
}

pub(super) async fn dispatch(
    State(f): State<Shared>,
    Path((o, r, file)): Path<(String, String, String)>,
    h: HeaderMap,
    Json(b): Json<DispatchBody>,
) -> Response {
    let (name, repo) = enter!(
        f,
        "POST /repos/{o}/{r}/actions/workflows/{file}/dispatches",
        h,
        o,
        r
    );
    let Some(workflow) = f
        .inner
        .lock()
        .api
        .workflows
        .get(&(name.clone(), file.clone()))
        .cloned()
    else {
        return error(StatusCode::NOT_FOUND, &format!("workflow {file} not found"));
    };
    let unexpected: Vec<String> = {
        let s = f.inner.lock();
        match s.api.declared_inputs.get(&(name.clone(), file.clone())) {
            Some(declared) => {
                let mut extra: Vec<String> = b
                    .inputs
                    .keys()
                    .filter(|k| !declared.contains(k))
                    .cloned()
                    .collect();
                extra.sort();
                extra
            }
            None => Vec::new(),
        }
    };
    if !unexpected.is_empty() {
        let mut resp = error(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!(
                "Unexpected inputs provided: {}",
                serde_json::to_string(&unexpected).unwrap_or_default()
            ),
        );
        // GitHub answers so, though its description lists only 200 and 204;
        // the test that declared the inputs set this answer up.
        resp.headers_mut()
            .insert(crate::record::INJECTED, axum::http::HeaderValue::from(1));
        return resp;
    }
    let Some(sha) = repo.branch_sha(&b.reference) else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("No ref found for: {}", b.reference),
        );
    };
    let inputs: Vec<(String, String)> = b
        .inputs
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string()),
            )
        })
        .collect();
    // The workflow's `run-name` (for a workflow given as commands, the
    // template's) puts the dispatch id in the run's title.
    let title = workflow
        .planned
        .as_ref()
        .and_then(|p| p.title(&inputs))
        .unwrap_or_else(|| {
            format!(
                "supervise {}",
                b.inputs
                    .get("dispatch_id")
                    .and_then(Value::as_str)
                    .unwrap_or(&b.reference)
            )
        });
    let run = {
        let mut s = f.inner.lock();
        let id = s.api.id() + 100_000;
        let run = Run {
            id,
            repo: name.clone(),
            workflow: file,
            display_title: title,
            head_branch: b.reference.clone(),
            head_sha: sha,
            status: "queued".into(),
            conclusion: None,
            inputs: json!(b.inputs),
            created_at: now(),
            created: f.started.elapsed().as_secs_f64(),
            pgid: None,
            cancel_requested: false,
        };
        s.api.runs.push(run.clone());
        run
    };
    tokio::spawn(execute(f.clone(), run.clone(), repo, workflow, inputs));
    if b.return_run_details {
        ok(json!({
            "workflow_run_id": run.id,
            "run_url": format!("{}/repos/{}/actions/runs/{}", f.url(), name, run.id),
            "html_url": format!("https://github.com/{}/actions/runs/{}", name, run.id),
        }))
    } else {
        StatusCode::NO_CONTENT.into_response()
    }
}

pub(super) fn set_run(f: &FakeGitHub, id: i64, update: impl FnOnce(&mut Run)) -> Option<Run> {
    let mut s = f.inner.lock();
    // Runs are added in id order (ids only grow).
    let at = s.api.runs.binary_search_by_key(&id, |r| r.id).ok()?;
    let run = &mut s.api.runs[at];
    update(run);
    Some(run.clone())
}

pub(super) async fn deliver_run(f: &FakeGitHub, action: &str, run: &Run) {
    let (owner, name) = run.repo.split_once('/').unwrap_or(("o", "r"));
    let payload = json!({
        "action": action,
        "workflow_run": run_json(run),
        "workflow": { "path": format!(".github/workflows/{}", run.workflow) },
        "repository": { "full_name": run.repo, "name": name, "owner": { "login": owner } },
        "installation": { "id": f.installation_of(&run.repo) },
    });
    {
        let mut s = f.inner.lock();
        let at = f.started.elapsed().as_secs_f64();
        s.run_deliveries
            .push((at, action.to_string(), run.display_title.clone()));
    }
    f.deliver("workflow_run", &payload).await;
}

/// A new directory for run `id`'s runner, made for it alone: fakes in one
/// process (tests side by side) count their runs alike, and a directory a
/// killed process left behind under a reused pid must not be taken over.
fn runner_dir(id: i64) -> std::io::Result<RunnerDir> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(sweep_dead_runners);
    loop {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("fake-runner-{}-{id}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            made => return made.map(|()| RunnerDir(dir)),
        }
    }
}

/// A run's runner directory, removed when the run ends however it ends: its
/// jobs finish, or the test ends first and its runtime drops the run's task
/// (a hanging agent's run, say). Each is a clone of the repository and more.
struct RunnerDir(std::path::PathBuf);

impl Drop for RunnerDir {
    fn drop(&mut self) {
        // A job dropped mid-step (its checkout still being written, say) may
        // add a file while the directory is being removed: try again, a
        // few times, rather than leave a clone behind.
        for _ in 0..10 {
            if std::fs::remove_dir_all(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// A job's process group, killed if the job's future is dropped before the
/// job ended (forgotten once it ended).
struct KillOnDrop(Option<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        signal(self.0, libc::SIGKILL);
    }
}

/// Runner directories of test processes that are gone (killed before their
/// runtime could drop anything): removed once per process, at its first run.
fn sweep_dead_runners() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("fake-runner-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Runs a dispatched workflow: its jobs in order, each on a "runner" of its
/// own, then the conclusion and the webhooks.
pub(super) async fn execute(
    f: Shared,
    run: Run,
    repo: Repo,
    workflow: Workflow,
    inputs: Vec<(String, String)>,
) {
    if let Some((lo, hi)) = workflow.simulated {
        simulate(f, run, lo, hi).await;
        return;
    }
    // Runners share nothing but artifacts: each job's directory is made
    // apart from the fake's own (where the repositories are), and a job that
    // may not push is not told where the repository is.
    let success = match runner_dir(run.id) {
        Ok(runner) => {
            let mut started = false;
            let ok = match &workflow.planned {
                Some(planned) => {
                    crate::workflow::run::run_jobs(
                        &f,
                        &run,
                        &repo,
                        planned,
                        &inputs,
                        &runner.0,
                        &mut started,
                    )
                    .await
                }
                None => {
                    run_commands(&f, &run, &repo, &workflow, &inputs, &runner.0, &mut started).await
                }
            };
            drop(runner);
            ok
        }
        Err(e) => {
            eprintln!("fake-github: run {} has no runner: {e}", run.id);
            false
        }
    };
    let done = set_run(&f, run.id, |r| {
        r.status = "completed".into();
        r.pgid = None;
        r.conclusion = Some(
            if r.cancel_requested {
                "cancelled"
            } else if success {
                "success"
            } else {
                "failure"
            }
            .into(),
        );
    });
    if let Some(r) = done {
        deliver_run(&f, "completed", &r).await;
    }
}

/// A workflow of one-command jobs, in order, each unless the run was
/// cancelled.
async fn run_commands(
    f: &Shared,
    run: &Run,
    repo: &Repo,
    workflow: &Workflow,
    inputs: &[(String, String)],
    runner: &std::path::Path,
    started: &mut bool,
) -> bool {
    let mut ok = true;
    for job in &workflow.jobs {
        if !is_cancelled(f, run) {
            ok = run_job(f, run, repo, job, inputs, runner, started).await && ok;
        }
    }
    ok
}

/// A run that does no work: in progress for a duration drawn in
/// `lo..=hi` ms (from the run's id, so a benchmark is repeatable), then
/// `success`, or `cancelled` as soon as a cancel arrives.
async fn simulate(f: Shared, run: Run, lo: u64, hi: u64) {
    let Some(r) = set_run(&f, run.id, |r| r.status = "in_progress".into()) else {
        return;
    };
    deliver_run(&f, "in_progress", &r).await;
    // A multiplicative hash of the id spreads consecutive runs over the range.
    let spread = (run.id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 33;
    let ms = lo + spread % (hi - lo + 1);
    // Where in a spread-out end (see `end_simulated_runs`) this run ends.
    let spread_bits = spread & ((1 << 31) - 1);
    let until = tokio::time::Instant::now() + std::time::Duration::from_millis(ms);
    let cancelled = loop {
        // Runs are kept in the order of their ids: found by bisection, as
        // thousands of simulated runs ask several times a second.
        let (cancel, ended) = {
            let s = f.inner.lock();
            let cancel = s
                .api
                .runs
                .binary_search_by_key(&run.id, |r| r.id)
                .ok()
                .is_some_and(|i| s.api.runs[i].cancel_requested);
            let (cutoff, spread) = (s.api.simulated_cutoff, s.api.simulated_spread);
            let at = cutoff + spread * (spread_bits as f64 / (1u64 << 31) as f64);
            (cancel, run.created < cutoff && f.now() >= at)
        };
        if cancel {
            break true;
        }
        if ended || tokio::time::Instant::now() >= until {
            break false;
        }
        tokio::time::sleep(
            std::time::Duration::from_millis(250).min(until - tokio::time::Instant::now()),
        )
        .await;
    };
    let conclusion = if cancelled {
        "cancelled"
    } else {
        match publish_simulated(&f, &run).await {
            Ok(()) => "success",
            Err(e) => {
                eprintln!(
                    "fake-github: simulated run {} published nothing: {e}",
                    run.id
                );
                "failure"
            }
        }
    };
    let done = set_run(&f, run.id, |r| {
        r.status = "completed".into();
        r.conclusion = Some(conclusion.into());
    });
    if let Some(r) = done {
        deliver_run(&f, "completed", &r).await;
    }
}

fn pairs(files: &[(String, String)]) -> Vec<(&str, &str)> {
    files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect()
}

/// What the fake's [`super::SimulatedPublisher`] says a simulated run leaves:
/// the agent's commit and the record's on the run's branch, then the check
/// runs on that head, as GitHub Actions made them. Git's work runs off the
/// async workers (it is blocking file I/O).
async fn publish_simulated(f: &Shared, run: &Run) -> Result<(), String> {
    let Some(publisher) = f.inner.lock().api.simulated_publisher.clone() else {
        return Ok(());
    };
    let Some(work) = publisher(run) else {
        return Ok(());
    };
    let repo = f.repo(&run.repo).ok_or("no such repository")?;
    let base = run.head_sha.clone();
    let (head, checks) = tokio::task::spawn_blocking(move || {
        let old = repo.branch_sha(&work.branch);
        let agent = repo.commit_on(
            old.as_deref().unwrap_or(&base),
            &pairs(&work.agent_files),
            &work.agent_message,
        )?;
        let record = (work.record)(&agent);
        let head = repo.commit_on(&agent, &pairs(&record.files), &record.message)?;
        repo.update_ref(&work.branch, &head, old.as_deref())?;
        Ok::<_, String>((head, record.checks))
    })
    .await
    .map_err(|e| e.to_string())??;
    let mut s = f.inner.lock();
    for c in checks {
        let id = s.api.id();
        s.api.check_runs.push(super::CheckRun {
            id,
            repo: run.repo.clone(),
            head_sha: head.clone(),
            name: c.name,
            app: "github-actions".into(),
            app_id: super::GITHUB_ACTIONS_APP_ID,
            status: "completed".into(),
            conclusion: Some(c.conclusion),
            title: String::new(),
            summary: c.summary,
            text: String::new(),
            annotations: Vec::new(),
            external_id: c.external_id,
            details_url: None,
        });
    }
    Ok(())
}

/// One job: a fresh checkout of the commit dispatched on (as
/// `actions/checkout` at `github.sha`, keeping the App's credential), its
/// command, and a push of what it committed to its `branch` input.
/// `started`: whether the run was said to be in progress yet.
async fn run_job(
    f: &Shared,
    run: &Run,
    repo: &Repo,
    job: &Job,
    inputs: &[(String, String)],
    runner: &std::path::Path,
    started: &mut bool,
) -> bool {
    let home = runner.join(&job.name);
    let dir = home.join("checkout");
    let temp = home.join("temp");
    let setup = std::fs::create_dir_all(&temp)
        .map_err(|e| e.to_string())
        .and_then(|()| repo.checkout(&run.head_sha, &dir));
    let token = f.mint_installation_token();
    let before = repo.branches();
    let mut cmd = tokio::process::Command::new("sh");
    // A job starts from a clean environment, as on a runner: what the
    // workflow gives it, and nothing of the process that runs the fake.
    cmd.env_clear();
    for keep in ["PATH", "LANG"] {
        if let Some(v) = std::env::var_os(keep) {
            cmd.env(keep, v);
        }
    }
    cmd.arg("-c")
        .arg(&job.command)
        .current_dir(&dir)
        .env("HOME", &home)
        .env("GITHUB_RUN_ID", run.id.to_string())
        .env("GITHUB_REF_NAME", &run.head_branch)
        .env("GITHUB_SHA", &run.head_sha)
        .env("GITHUB_REPOSITORY", &run.repo)
        .env("GITHUB_API_URL", f.url())
        .env("GITHUB_TOKEN", &token)
        .env("RUNNER_TEMP", &temp)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    match std::fs::File::create(home.join("log")) {
        Ok(log) => {
            cmd.stdout(std::process::Stdio::from(log));
        }
        Err(_) => {
            cmd.stdout(std::process::Stdio::null());
        }
    }
    for (k, v) in inputs {
        cmd.env(format!("INPUT_{}", k.to_uppercase()), v);
    }
    for (k, v) in &job.env {
        cmd.env(k, v);
    }
    let ok = match setup {
        Ok(()) => run_process(f, run, cmd, started).await,
        Err(e) => Err(e),
    };
    let ok = match ok {
        Ok(ok) => {
            // What the job committed goes where its `branch` input says, as
            // its checkout's credentials would push it.
            let push_to = inputs
                .iter()
                .find(|(k, _)| k == "branch")
                .map_or_else(|| run.head_branch.clone(), |(_, v)| v.clone());
            let _ = crate::git::git(
                &dir,
                &[
                    "push",
                    "-q",
                    "origin",
                    &format!("HEAD:refs/heads/{push_to}"),
                ],
            );
            ok
        }
        Err(e) => {
            eprintln!(
                "fake-github: run {} job {} could not start: {e}",
                run.id, job.name
            );
            false
        }
    };
    // Every branch the job moved, as pushes: CI starts on each.
    let after = repo.branches();
    for (branch, sha) in &after {
        if !before.iter().any(|(b, s)| b == branch && s == sha) {
            f.on_push(&run.repo, sha);
        }
    }
    let _ = std::fs::remove_dir_all(&home);
    ok
}

/// Whether a cancel of `run` was asked for.
pub(crate) fn is_cancelled(f: &FakeGitHub, run: &Run) -> bool {
    // Looked up by id (runs are kept in id order) rather than by copying
    // the repository's runs: it is asked before every step and every
    // 100 ms while a cancelled step ends.
    let s = f.inner.lock();
    s.api
        .runs
        .binary_search_by_key(&run.id, |r| r.id)
        .is_ok_and(|at| s.api.runs[at].cancel_requested)
}

/// Runs one process of a run's job (a one-command job, or one step) in a
/// process group of its own, noted on the run so that a cancel reaches it;
/// the run is said to be in progress when its first process starts
/// (`started`). A cancelled run ends when its last process does (a step
/// that ignores the cancel keeps the run going until a force-cancel), and
/// nothing the process started lives on after it.
pub(crate) async fn run_process(
    f: &Shared,
    run: &Run,
    mut cmd: tokio::process::Command,
    started: &mut bool,
) -> Result<bool, String> {
    cmd.process_group(0);
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let pgid = child.id();
    if let Some(r) = set_run(f, run.id, |r| {
        r.status = "in_progress".into();
        r.pgid = pgid;
    }) {
        if !*started {
            *started = true;
            deliver_run(f, "in_progress", &r).await;
        }
    }
    // A cancel that arrived while the run was queued, or between steps.
    if is_cancelled(f, run) {
        signal(pgid, libc::SIGTERM);
    }
    // A run dropped mid-job (the test ended while its agent hung) takes the
    // job's processes with it: one left running would write into the runner
    // directory as it is removed.
    let group = KillOnDrop(pgid);
    let ok = child.wait().await.map(|s| s.success()).unwrap_or(false);
    std::mem::forget(group);
    while is_cancelled(f, run) && group_alive(pgid) {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The runner goes away with the job: nothing it started lives on.
    signal(pgid, libc::SIGKILL);
    Ok(ok)
}

/// Copies a directory tree (regular files and directories; links are not
/// followed, nor copied).
pub(crate) fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Whether any process of the group is still running, read from /proc (zombies,
/// which a container's init may never reap, do not count).
pub(super) fn group_alive(pgid: Option<u32>) -> bool {
    let Some(p) = pgid else { return false };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        // "pid (comm) state ppid pgrp …": the command may hold spaces and parens.
        let Some(rest) = stat.rsplit_once(") ").map(|x| x.1) else {
            return false;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("Z");
        let pgrp = f.nth(1).and_then(|g| g.parse::<u32>().ok());
        pgrp == Some(p) && state != "Z" && state != "X"
    })
}

pub(super) fn signal(pgid: Option<u32>, sig: libc::c_int) {
    if let Some(p) = pgid {
        // SAFETY: kill(2) with a negative pid signals that process group only.
        unsafe {
            libc::kill(-(p as libc::pid_t), sig);
        }
    }
}

#[derive(Deserialize)]
pub(super) struct RunsQuery {
    created: Option<String>,
}

pub(super) async fn list_runs(
    State(f): State<Shared>,
    Path((o, r, file)): Path<(String, String, String)>,
    Query(q): Query<RunsQuery>,
    h: HeaderMap,
) -> Response {
    let (name, _) = enter!(
        f,
        "GET /repos/{o}/{r}/actions/workflows/{file}/runs",
        h,
        o,
        r
    );
    let since = q
        .created
        .as_deref()
        .and_then(|c| c.strip_prefix(">="))
        .map(str::to_string);
    let mut list: Vec<Value> = f
        .runs(&name)
        .iter()
        .filter(|r| r.workflow == file)
        .filter(|r| {
            since
                .as_ref()
                .is_none_or(|s| r.created_at.as_str() >= s.as_str())
        })
        .map(run_json)
        .collect();
    list.reverse(); // newest first, as GitHub lists them
    ok(json!({ "total_count": list.len(), "workflow_runs": list }))
}

pub(super) async fn get_run(
    State(f): State<Shared>,
    Path((o, r, id)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    let (name, _) = enter!(f, "GET /repos/{o}/{r}/actions/runs/{id}", h, o, r);
    match f.runs(&name).iter().find(|r| r.id == id) {
        Some(r) => ok(run_json(r)),
        None => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

pub(super) async fn cancel(
    f: Shared,
    o: String,
    r: String,
    id: i64,
    h: HeaderMap,
    force: bool,
) -> Response {
    let endpoint = if force {
        "POST /repos/{o}/{r}/actions/runs/{id}/force-cancel"
    } else {
        "POST /repos/{o}/{r}/actions/runs/{id}/cancel"
    };
    let _ = enter!(f, endpoint, h, o, r);
    let Some(run) = set_run(&f, id, |r| {
        if r.status != "completed" {
            r.cancel_requested = true;
        }
    }) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    if run.status == "completed" {
        return error(
            StatusCode::CONFLICT,
            "Cannot cancel a workflow run that is completed.",
        );
    }
    signal(run.pgid, if force { libc::SIGKILL } else { libc::SIGTERM });
    (StatusCode::ACCEPTED, Json(json!({}))).into_response()
}

pub(super) async fn cancel_run(
    State(f): State<Shared>,
    Path((o, r, id)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    cancel(f, o, r, id, h, false).await
}

pub(super) async fn force_cancel_run(
    State(f): State<Shared>,
    Path((o, r, id)): Path<(String, String, i64)>,
    h: HeaderMap,
) -> Response {
    cancel(f, o, r, id, h, true).await
}
