//! `supervise fence … -- COMMAND…`: how the agent workflow runs an agent.
//! Started as root (`sudo`), before the agent it:
//!
//! - reads the model keys from a file an earlier step wrote (so no shell of
//!   the agent's step ever held them), deletes it, and serves the model
//!   proxy: the agent is given a token and the proxy's address instead;
//! - makes the agent a network namespace whose only ways out are a bridge
//!   to that proxy and an HTTP proxy to the allowed domains (`network:` in
//!   the repository's settings, as the trusted commit has them);
//! - has the job's user give up its passwordless `sudo` (`--drop-sudo`);
//!
//! and then runs the agent as the job's user, with no supplementary group
//! and no way to gain a privilege, in PID and mount namespaces of its own
//! (a `/proc` of its own; whatever it leaves running ends with it). What
//! the egress proxy refused closes the agent's output and is written as
//! JSON beside it.
//!
//! Not root (a self-hosted runner without sudo), it cannot fence: on a
//! hosted runner that is an error; elsewhere it says so and runs the agent
//! behind the model proxy only. `supervise model-proxy` is that last mode,
//! kept for workflows copied before the fence.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::model_proxy::{Grant, ModelProxy, PROVIDER_KEYS};
use crate::sandbox::{Egress, User};

#[derive(Debug, Clone, Args)]
pub struct FenceArgs {
    /// `NAME=VALUE` lines: the providers' keys (`ANTHROPIC_API_KEY`,
    /// `OPENAI_API_KEY`, `GEMINI_API_KEY`) and, for a gateway, their base
    /// addresses. Deleted once read.
    #[arg(long)]
    pub keys: Option<PathBuf>,
    /// The repository's settings file, as the trusted commit has it: its
    /// `network:` is the allow-list (default: the package registries).
    #[arg(long, env = "SUPERVISE_FENCE_SETTINGS")]
    pub settings: Option<PathBuf>,
    /// Who the agent runs as (`UID:GID`); default: who ran `sudo`.
    #[arg(long)]
    pub user: Option<User>,
    /// The sudoers rule the job's user removes (`sudo rm`) before the agent
    /// starts; a hosted runner's is `/etc/sudoers.d/runner`.
    #[arg(long, value_name = "RULE", env = "SUPERVISE_FENCE_DROP_SUDO")]
    pub drop_sudo: Option<PathBuf>,
    /// Where the agent's output (standard output and error) goes, closed by
    /// the fence's account of what it refused; the fence's own messages go
    /// to its standard error, the job's log.
    #[arg(long, env = "SUPERVISE_FENCE_OUTPUT")]
    pub output: Option<PathBuf>,
    /// Where what was refused goes, as `{"refused": {HOST: COUNT}}`.
    #[arg(long, env = "SUPERVISE_FENCE_REFUSALS")]
    pub refusals: Option<PathBuf>,
    /// The agent's command line.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `supervise model-proxy`: the model proxy without the fence.
#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// As `fence --keys`.
    #[arg(long)]
    pub keys: PathBuf,
    /// The agent's command line.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// The fence's second stage, inside the new namespaces (not for people).
#[derive(Debug, Clone, Args)]
pub struct InitArgs {
    #[arg(long)]
    pub user: User,
    /// The namespaces' PID 1, which starts the agent.
    #[arg(long)]
    pub inner: bool,
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub fn run_proxy(args: &ProxyArgs) -> Result<i32> {
    let vars = read_keys(&args.keys)?;
    let (proxy, grant) = model_proxy(&vars)?;
    let code = unfenced(&args.command, grant.as_ref(), None)?;
    drop(proxy);
    Ok(code)
}

pub fn run(args: &FenceArgs) -> Result<i32> {
    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root && sudo_works() {
        // The job's user on a hosted runner: the same command, as root,
        // before anything is read.
        let err = as_root(args.user.is_none()).exec();
        return Err(anyhow!("running supervise fence through sudo: {err}"));
    }
    let vars = match &args.keys {
        Some(path) => read_keys(path)?,
        None => HashMap::new(),
    };
    let (proxy, grant) = model_proxy(&vars)?;
    let hosted = std::env::var("RUNNER_ENVIRONMENT").as_deref() == Ok("github-hosted");
    if !root {
        if hosted {
            bail!("the agent cannot be fenced without root: run `sudo -n -E supervise fence …`, as the agent workflow does");
        }
        eprintln!("::warning::supervise fence is not root here: the agent runs behind the model proxy only, with the network open");
        let code = unfenced(&args.command, grant.as_ref(), args.output.as_deref())?;
        drop(proxy);
        return Ok(code);
    }
    let egress = egress(args.settings.as_deref())?;
    let model_env = grant.as_ref().map(|g| g.env.clone()).unwrap_or_default();
    let sandbox = crate::sandbox::open(&egress, &model_env)?;
    let user = args.user.or_else(sudo_user).unwrap_or(User {
        // SAFETY: getuid(2), getgid(2) cannot fail.
        uid: unsafe { libc::getuid() },
        gid: unsafe { libc::getgid() },
    });
    if let Some(rule) = &args.drop_sudo {
        drop_sudo(rule, user, hosted)?;
    }
    let allowed = if egress.allowed.is_empty() {
        "no domain".to_string()
    } else {
        format!("{} domains", egress.allowed.len())
    };
    eprintln!(
        "supervise fence: the agent runs as {}:{} in namespaces of its own, reaching its model and {allowed}",
        user.uid, user.gid
    );
    let program = std::env::current_exe().context("finding supervise itself")?;
    let mut cmd = Command::new(program);
    cmd.arg("fence-init")
        .arg("--user")
        .arg(format!("{}:{}", user.uid, user.gid))
        .arg("--")
        .args(&args.command);
    for name in PROVIDER_KEYS
        .iter()
        .chain(&["SUDO_USER", "SUDO_UID", "SUDO_GID", "SUDO_COMMAND"])
    {
        cmd.env_remove(name);
    }
    cmd.envs(sandbox.env.iter().map(|(k, v)| (k, v)));
    cmd.envs(traceparent());
    if let Some(path) = &args.output {
        let out = create_for(path, user)?;
        cmd.stdout(out.try_clone()?).stderr(out);
    }
    let netns = sandbox.netns.try_clone()?;
    // A cancel is the agent's to hear; the fence waits for it to end.
    crate::sandbox::ignore_cancel_signals();
    // SAFETY: setns(2) and unshare(2) only, between fork and exec.
    unsafe {
        cmd.pre_exec(move || crate::sandbox::enter_fenced(&netns));
    }
    let status = cmd.status().context("starting the fenced agent")?;
    drop(proxy);
    let refused = sandbox.refused();
    if let Some(path) = &args.refusals {
        create_for(path, user)?.write_all(&crate::sandbox::refusals_json(&refused))?;
    }
    if let Some(line) = crate::sandbox::refusal_line(&refused) {
        eprintln!("{line}");
        if let Some(path) = &args.output {
            let mut out = std::fs::OpenOptions::new().append(true).open(path)?;
            writeln!(out, "\n{line}")?;
        }
    }
    Ok(status.code().unwrap_or(1))
}

/// The fence's later stages. Outside the new PID namespace (`fence-init`):
/// starts its PID 1 (`fence-init --inner`), which mounts its `/proc` and
/// starts the agent as the job's user, so the agent is never PID 1 (which
/// would ignore a cancel it has no handler for). Both stages ignore the
/// cancel signals and wait: the agent, in their process group, gets them.
pub fn run_init(args: &InitArgs) -> Result<i32> {
    crate::sandbox::ignore_cancel_signals();
    let user = args.user;
    let mut cmd = if args.inner {
        let (program, rest) = args
            .command
            .split_first()
            .ok_or_else(|| anyhow!("no command to run"))?;
        let mut cmd = Command::new(program);
        cmd.args(rest);
        // SAFETY: signal(2), prctl(2) and the set*id(2) calls only, between
        // fork and exec.
        unsafe {
            cmd.pre_exec(move || crate::sandbox::become_agent(user));
        }
        cmd
    } else {
        let mut cmd = Command::new(std::env::current_exe().context("finding supervise itself")?);
        cmd.args(["fence-init", "--inner", "--user"])
            .arg(format!("{}:{}", user.uid, user.gid))
            .arg("--")
            .args(&args.command);
        // SAFETY: mount(2) and prctl(2) only, between fork and exec.
        unsafe {
            cmd.pre_exec(crate::sandbox::become_init);
        }
        cmd
    };
    let status = cmd
        .status()
        .with_context(|| format!("starting {}", args.command.join(" ")))?;
    Ok(status.code().unwrap_or(1))
}

/// The keys file's variables; the file is gone once read.
fn read_keys(path: &Path) -> Result<HashMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    std::fs::remove_file(path).with_context(|| format!("deleting {} once read", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}

/// The proxy for the keys given, and the agent's grant; none without a key
/// (a secret not set: the agent has no key of its own either).
fn model_proxy(vars: &HashMap<String, String>) -> Result<(Option<ModelProxy>, Option<Grant>)> {
    let proxy = ModelProxy::from_vars(|name| vars.get(name).cloned())?;
    if proxy.is_some() {
        // Not readable by the agent (the same user, unfenced) through /proc
        // or ptrace.
        // SAFETY: prctl(PR_SET_DUMPABLE) changes only this process's flag.
        unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        }
    }
    let grant = proxy
        .as_ref()
        .map(|p| p.grant(Duration::from_secs(24 * 3600)));
    Ok((proxy, grant))
}

/// The agent behind the model proxy only.
fn unfenced(command: &[String], grant: Option<&Grant>, output: Option<&Path>) -> Result<i32> {
    let (program, rest) = command
        .split_first()
        .ok_or_else(|| anyhow!("no command to run"))?;
    let mut cmd = Command::new(program);
    cmd.args(rest);
    for name in PROVIDER_KEYS {
        cmd.env_remove(name);
    }
    cmd.envs(grant.iter().flat_map(|g| g.env.iter()).map(|(k, v)| (k, v)));
    cmd.envs(traceparent());
    if let Some(path) = output {
        let out = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        cmd.stdout(out.try_clone()?).stderr(out);
    }
    let status = cmd
        .status()
        .with_context(|| format!("starting {program}"))?;
    Ok(status.code().unwrap_or(1))
}

/// The allow-list: the settings' `network:`, else the registries.
fn egress(settings: Option<&Path>) -> Result<Egress> {
    let network = match settings.filter(|p| p.exists()) {
        Some(path) => crate::settings::read_file(path)?.network,
        None => None,
    };
    Ok(crate::settings::egress(network))
}

/// The agent joins its attempt's span of the operation's trace, derived from
/// the dispatch id the workflow was given, as the service derives it.
fn traceparent() -> Option<(&'static str, String)> {
    let dispatch = std::env::var("SUPERVISE_DISPATCH_ID").ok()?;
    let op = crate::otlp::operation_of(&dispatch);
    Some(("TRACEPARENT", crate::otlp::traceparent(op, &dispatch)))
}

fn sudo_works() -> bool {
    Command::new("sudo")
        .args(["-n", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// This very command through `sudo`, keeping the environment, the `PATH`
/// and `HOME` included (which sudo would reset), and naming the user it
/// was started as.
fn as_root(name_user: bool) -> Command {
    let mut cmd = Command::new("sudo");
    cmd.args(["-n", "-E", "env"]);
    for var in ["PATH", "HOME"] {
        if let Some(value) = std::env::var_os(var) {
            let mut pair = std::ffi::OsString::from(format!("{var}="));
            pair.push(value);
            cmd.arg(pair);
        }
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| "supervise".into());
    cmd.arg(exe).arg("fence");
    if name_user {
        // SAFETY: getuid(2), getgid(2) cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        cmd.arg("--user").arg(format!("{uid}:{gid}"));
    }
    let args: Vec<_> = std::env::args_os().collect();
    let after = args
        .iter()
        .position(|a| a == "fence")
        .map_or(args.len(), |i| i + 1);
    cmd.args(&args[after..]);
    cmd
}

/// Who ran `sudo`.
fn sudo_user() -> Option<User> {
    let var = |n| std::env::var(n).ok()?.parse().ok();
    Some(User {
        uid: var("SUDO_UID")?,
        gid: var("SUDO_GID")?,
    })
}

/// The job's user removes its own sudo rule, as the job's log then says;
/// that sudo still lets it in fails the job on a hosted runner. (The agent
/// could not use it anyway, with no new privileges; the steps after it
/// could.)
fn drop_sudo(rule: &Path, user: User, hosted: bool) -> Result<()> {
    let as_user = |args: &[&std::ffi::OsStr]| {
        Command::new("sudo")
            .args(args)
            .uid(user.uid)
            .gid(user.gid)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let _ = as_user(&[
        "-n".as_ref(),
        "rm".as_ref(),
        "-f".as_ref(),
        rule.as_os_str(),
    ]);
    let _ = as_user(&["-k".as_ref()]);
    if as_user(&["-n".as_ref(), "true".as_ref()]) {
        if hosted {
            bail!(
                "sudo still works after {} was removed; the steps after the agent could be root",
                rule.display()
            );
        }
        eprintln!("::warning::sudo still works for the job's user on this self-hosted runner (the agent itself cannot use it)");
    } else {
        eprintln!("sudo dropped: neither the agent nor the steps after it can become root");
    }
    Ok(())
}

/// A file made by root for the job's user, who reads it in later steps.
fn create_for(path: &Path, user: User) -> Result<File> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    std::os::unix::fs::fchown(&file, Some(user.uid), Some(user.gid))
        .with_context(|| format!("giving {} to the job's user", path.display()))?;
    Ok(file)
}
