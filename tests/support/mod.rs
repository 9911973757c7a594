#![allow(dead_code)] // each test binary uses a part of what is shared here
//! What the tests share: for `supervise serve`, a free port, the real binary
//! started against the fake GitHub, and waiting for it to listen; for local
//! runs, git and a repository with a scripted agent ([`Checkout`]).

pub mod hostile;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const SECRET: &str = "s3cret";

/// The shipped agent workflow, as the repository holds it.
pub fn shipped_agent_workflow() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".github/workflows/supervise-agent.yml"),
    )
    .expect("the shipped agent workflow")
}

/// The agent workflow `yaml` (the shipped one, or one a test changed) as
/// the fake GitHub's runner runs it, for a repository that runs Claude Code
/// (`claude`, an executable playing its command line) with `secrets` added
/// to the App's credentials (see [`fake_github::workflow::Setup::claude_code`]);
/// the install steps fetch this build's `supervise` as the release.
pub fn agent_workflow(
    yaml: &str,
    claude: &Path,
    secrets: &[(&str, &str)],
) -> fake_github::workflow::Planned {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut setup = fake_github::workflow::Setup::claude_code(
        claude,
        Path::new(env!("CARGO_BIN_EXE_supervise")),
        &root.join("scripts/install-release"),
    );
    for (k, v) in secrets {
        setup.secrets.insert(k.to_string(), v.to_string());
    }
    fake_github::workflow::Planned::new(yaml, setup).expect("the agent workflow reads")
}

/// A port to listen on later, free now. Taken below the kernel's range for
/// ephemeral ports (32768–60999 on Linux): a port the kernel handed out for
/// `:0` is soon handed out again — to a browser's debugging port, or any
/// outgoing connection — between this look and the listener's bind. Each
/// test process walks its own sequence (from its pid), so two rarely meet.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let start = std::process::id().wrapping_mul(7919) % SPAN;
    for _ in 0..SPAN {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + (start + k.wrapping_mul(97)) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `supervise serve` as the test App (id 42) with `env` added.
pub fn spawn_serve(port: u16, api: &str, db_url: &str, env: &[(&str, String)]) -> Child {
    serve_command(port, api, db_url, env).spawn().unwrap()
}

/// The `supervise serve` command [`spawn_serve`] starts, for a test that
/// changes how it is started (its limits, say).
pub fn serve_command(port: u16, api: &str, db_url: &str, env: &[(&str, String)]) -> Command {
    let key = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/app/test-app-key.pem");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_supervise"));
    cmd.arg("serve")
        .env("SUPERVISE_LISTEN", format!("127.0.0.1:{port}"))
        .env("GITHUB_APP_ID", "42")
        .env("GITHUB_PRIVATE_KEY_PATH", key)
        .env("GITHUB_WEBHOOK_SECRET", format!("old-secret,{SECRET}"))
        .env("GITHUB_API_URL", api)
        .env("DATABASE_URL", db_url)
        .env("SUPERVISE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(if std::env::var("SERVE_LOG").is_ok() {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

pub async fn wait_listening(port: u16) {
    let start = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "serve did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn test_app_public_key() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/app/test-app-key.pub.pem"),
    )
    .unwrap()
}

/// A fake GitHub for the test App (id 42, installation 7), delivering its
/// webhooks to `webhook_port` when given.
pub async fn fake_github(
    webhook_port: Option<u16>,
    data_dir: Option<std::path::PathBuf>,
) -> std::sync::Arc<fake_github::FakeGitHub> {
    fake_github::start(fake_github::Config {
        webhook_url: webhook_port.map(|p| format!("http://127.0.0.1:{p}/webhook")),
        webhook_secret: SECRET.into(),
        app_id: 42,
        app_public_key_pem: Some(test_app_public_key()),
        installation_id: 7,
        data_dir,
    })
    .await
}

/// A fresh database on the test PostgreSQL server (scripts/test starts one), so
/// tests never see each other's rows.
pub async fn postgres_database() -> String {
    let base = std::env::var("SUPERVISE_TEST_POSTGRES_URL")
        .expect("SUPERVISE_TEST_POSTGRES_URL: run scripts/test, which starts PostgreSQL");
    sqlx::any::install_default_drivers();
    let admin = sqlx::AnyPool::connect(&base)
        .await
        .expect("PostgreSQL reachable");
    let name = format!(
        "supervise_t{}_{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0) % 1_000_000_000
    );
    // The name is made of digits and a fixed prefix only.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await
        .unwrap();
    let (head, _) = base.rsplit_once('/').unwrap();
    format!("{head}/{name}")
}

/// A plain HTTP GET to the service: (status, the whole response).
#[allow(dead_code)]
pub async fn get(port: u16, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// What a command printed, its standard output then its error output.
pub fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs git in `dir` with a fixed identity; panics with git's words if it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@x")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@x")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A git repository of its own (in a temporary directory) with `files`
/// committed on `main`, and a scripted agent that reads its behaviour from a
/// file beside the repository and logs each invocation there: what the local
/// stories run `supervise` in.
pub struct Checkout {
    pub root: PathBuf,
    pub log: PathBuf,
    pub behaviour: PathBuf,
    agent: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Checkout {
    /// `agent` is a script's path from the project's top.
    pub fn new(files: &[(&str, &str)], agent: &str, behaviour: &str) -> Checkout {
        Checkout::new_in("repo", files, agent, behaviour)
    }

    /// As [`Checkout::new`], the repository in a directory named `dir`.
    pub fn new_in(dir: &str, files: &[(&str, &str)], agent: &str, behaviour: &str) -> Checkout {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(dir);
        std::fs::create_dir_all(&root).unwrap();
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        git(&root, &["init", "-q", "-b", "main"]);
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "start"]);
        let b = tmp.path().join("behaviour");
        std::fs::write(&b, behaviour).unwrap();
        Checkout {
            log: tmp.path().join("agent.log"),
            behaviour: b,
            agent: Path::new(env!("CARGO_MANIFEST_DIR")).join(agent),
            root,
            _tmp: tmp,
        }
    }

    /// `supervise ARGS` in the repository, with the agent, its files, a git
    /// identity and a 100 ms tick.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_supervise"));
        c.args(args)
            .current_dir(&self.root)
            .env("SUPERVISE_AGENT", &self.agent)
            .env("AGENT_LOG", &self.log)
            .env("AGENT_BEHAVIOUR", &self.behaviour)
            .env("GIT_AUTHOR_NAME", "agent")
            .env("GIT_AUTHOR_EMAIL", "agent@x")
            .env("GIT_COMMITTER_NAME", "agent")
            .env("GIT_COMMITTER_EMAIL", "agent@x")
            .env("SUPERVISE_TICK_MS", "100");
        c
    }

    /// The agent's log: one line per invocation, in order.
    pub fn invocations(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// "<unit> <sprint>" of each agent run, in order.
    pub fn sprints_run(&self) -> Vec<String> {
        self.invocations()
            .iter()
            .map(|l| l.split(' ').take(2).collect::<Vec<_>>().join(" "))
            .collect()
    }
}

/// A small deterministic generator (xorshift64), so that a failing seed can
/// be run again.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(
            seed.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        )
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Lets `child` run for `delay`: how it ended if it did by then; otherwise it
/// is killed with SIGKILL and reaped (`None`).
pub fn kill_after(child: &mut Child, delay: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < delay {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    None
}

impl Checkout {
    /// Every dispatch id in the agent's log appears once: no attempt ran
    /// twice (each invocation's line ends with its dispatch id).
    pub fn assert_no_attempt_ran_twice(&self, context: &str) {
        let inv = self.invocations();
        let mut ids: Vec<&str> = inv.iter().map(|l| l.rsplit(' ').next().unwrap()).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n, "{context}: an attempt ran twice: {inv:?}");
    }
}

/// Spreads connections on `port` over the replicas at `backends`, skipping
/// one that refuses (a load balancer in front of the service, as Compose or
/// Kubernetes would have). Serves until the runtime ends.
pub fn balance(port: u16, backends: Vec<u16>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let mut next = 0usize;
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                return;
            };
            next += 1;
            let order: Vec<u16> = (0..backends.len())
                .map(|i| backends[(next + i) % backends.len()])
                .collect();
            tokio::spawn(async move {
                for b in order {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(("127.0.0.1", b)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                        return;
                    }
                }
            });
        }
    })
}

/// A small OTLP/HTTP collector: every request's JSON body, read as
/// OpenTelemetry's own protobuf definitions say (`opentelemetry-proto`'s
/// serde mapping of `ExportTraceServiceRequest`): a body that does not
/// follow them fails the test.
pub fn collector() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<opentelemetry_proto::tonic::trace::v1::Span>>>,
) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use std::io::{BufRead, BufReader, Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let spans = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let got = spans.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let mut r = BufReader::new(c.try_clone().unwrap());
            let (mut len, mut path) = (0usize, String::new());
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if path.is_empty() {
                    path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            assert_eq!(path, "/v1/traces");
            let req: ExportTraceServiceRequest =
                serde_json::from_slice(&body).unwrap_or_else(|e| {
                    panic!("not OTLP JSON ({e}): {}", String::from_utf8_lossy(&body))
                });
            for rs in req.resource_spans {
                for ss in rs.scope_spans {
                    got.lock().unwrap().extend(ss.spans);
                }
            }
            let mut c = c;
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
        }
    });
    (url, spans)
}

/// A span's attribute as text (empty when it has none).
pub fn span_attr(s: &opentelemetry_proto::tonic::trace::v1::Span, k: &str) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    match s
        .attributes
        .iter()
        .find(|a| a.key == k)
        .and_then(|a| a.value.clone())
        .and_then(|v| v.value)
    {
        Some(Value::StringValue(x)) => x,
        Some(Value::IntValue(x)) => x.to_string(),
        Some(Value::DoubleValue(x)) => x.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
