use clap::{CommandFactory, Parser};
use std::io::IsTerminal;
use supervise::cli::{self, Cli};

fn main() {
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        // clap quotes the argument it did not understand; when that argument may
        // be a secret (a key pasted as a flag), it is not repeated.
        if std::env::args_os().skip(1).any(|a| looks_secret(&a.to_string_lossy())) {
            eprintln!("error: an argument was not understood, and it is not shown because it may hold a secret. Secrets are read from the environment only: GITHUB_WEBHOOK_SECRET (or GITHUB_WEBHOOK_SECRET_PATH) and GITHUB_PRIVATE_KEY (or GITHUB_PRIVATE_KEY_PATH). See `supervise --help`.");
            std::process::exit(1);
        }
        // A value clap read from a variable is that variable's mistake.
        if let Some(said) = blamed_on_variable(&e) {
            eprintln!("{said}");
            std::process::exit(1);
        }
        // Help and --version are answers (0); a usage mistake exits 1, as the
        // README's table says — 2 means "verification found issues".
        let _ = e.print();
        std::process::exit(if e.use_stderr() { 1 } else { 0 });
    });
    if !matches!(cli.command, cli::Command::Serve(_)) {
        // A command line tool piped into `head` should stop quietly when the
        // reader goes away, not panic on EPIPE. (The service keeps Rust's
        // default: a closed socket is an error to handle, not a signal.)
        // SAFETY: resetting a signal disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    // Every secret the environment holds is known to the scrubber before
    // anything is written anywhere.
    supervise::scrub::register_environment();
    // SUPERVISE_LOG, else the RUST_LOG every Rust service honours, else
    // warnings — but not the GitHub client's own: what a failed request
    // means is said once, by the command, in its words.
    let filter = tracing_subscriber::EnvFilter::try_from_env("SUPERVISE_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_env("RUST_LOG"))
        .unwrap_or_else(|_| "warn,octocrab=off".into());
    // Colour for a person at a terminal, never escape codes in a file.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(|| supervise::scrub::ScrubbedStderr);
    if cli.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
    let code = match cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    };
    supervise::otlp::flush();
    std::process::exit(code);
}

/// clap's refusal of a value it took from a variable (`GITHUB_APP_ID=abc`),
/// said of the variable: clap names the flag, which the person never typed.
fn blamed_on_variable(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::ValueValidation && e.kind() != ErrorKind::InvalidValue {
        return None;
    }
    let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) = (
        e.get(ContextKind::InvalidArg),
        e.get(ContextKind::InvalidValue),
    ) else {
        return None;
    };
    let long = arg.split([' ', '=']).next()?.strip_prefix("--")?;
    let typed =
        std::env::args().any(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")));
    if typed {
        return None;
    }
    fn find(cmd: &clap::Command, long: &str, value: &str) -> Option<String> {
        let here = cmd.get_arguments().find_map(|a| {
            let var = a.get_env()?.to_str()?;
            (a.get_long() == Some(long) && std::env::var(var).ok().as_deref() == Some(value))
                .then(|| var.to_string())
        });
        here.or_else(|| cmd.get_subcommands().find_map(|c| find(c, long, value)))
    }
    let var = find(&Cli::command(), long, value)?;
    if looks_secret(value) {
        return Some(format!(
            "error: the environment variable {var} does not hold a valid value for --{long} (not shown: it may be a secret). Set {var} to a valid value, or unset it."
        ));
    }
    let text = e.to_string();
    let why = text
        .lines()
        .next()
        .and_then(|l| l.rsplit_once(": "))
        .map(|(_, w)| format!(" ({w})"))
        .unwrap_or_default();
    Some(format!(
        "error: the environment variable {var} is `{value}`, which is not a valid value for --{long}{why}. Set {var} to a valid value, or unset it."
    ))
}

/// A PEM block, a line break, or a long unbroken token: what a key or secret
/// pasted on the command line looks like.
fn looks_secret(arg: &str) -> bool {
    arg.contains("PRIVATE KEY")
        || arg.contains('\n')
        || (arg.len() >= 32 && !arg.contains(' ') && !arg.starts_with('-') && !arg.contains('/'))
}
