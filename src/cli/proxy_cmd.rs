//! `supervise model-proxy --keys FILE -- COMMAND…`: the agent workflow's
//! way to run an agent without giving it the model key. The keys come from
//! a file an earlier step wrote (so no shell of the agent's step ever held
//! them), which is deleted once read; the command runs with a token and the
//! proxy's address in their place, and the proxy ends with it.

use anyhow::{anyhow, Context, Result};
use clap::Args;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// `NAME=VALUE` lines: the providers' keys (`ANTHROPIC_API_KEY`,
    /// `OPENAI_API_KEY`, `GEMINI_API_KEY`) and, for a gateway, their base
    /// addresses. Deleted once read.
    #[arg(long)]
    pub keys: PathBuf,
    /// The agent's command line.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub fn run(args: &ProxyArgs) -> Result<i32> {
    let text = std::fs::read_to_string(&args.keys)
        .with_context(|| format!("reading {}", args.keys.display()))?;
    std::fs::remove_file(&args.keys)
        .with_context(|| format!("deleting {} once read", args.keys.display()))?;
    let vars: HashMap<String, String> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    // No key (a secret not set): nothing to hold back, and the agent runs
    // as it would have, with no key of its own either.
    let proxy = crate::model_proxy::ModelProxy::from_vars(|name| vars.get(name).cloned())?;
    if proxy.is_some() {
        // Not readable by the agent (the same user) through /proc or ptrace.
        // SAFETY: prctl(PR_SET_DUMPABLE) changes only this process's flag.
        unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        }
    }
    let grant = proxy
        .as_ref()
        .map(|p| p.grant(Duration::from_secs(24 * 3600)));
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| anyhow!("no command to run"))?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest);
    for name in crate::model_proxy::PROVIDER_KEYS {
        cmd.env_remove(name);
    }
    cmd.envs(grant.iter().flat_map(|g| g.env.iter()).map(|(k, v)| (k, v)));
    let status = cmd
        .status()
        .with_context(|| format!("starting {program}"))?;
    drop(proxy);
    // Nothing of its own on the agent's output, which is read as the CLI's.
    Ok(status.code().unwrap_or(1))
}
