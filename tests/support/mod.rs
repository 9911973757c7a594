#![allow(dead_code)] // each test binary uses a part of what is shared here
//! What the `supervise serve` tests share: a free port, the real binary started
//! against the fake GitHub, and waiting for it to listen.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const SECRET: &str = "s3cret";

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `supervise serve` as the test App (id 42) with `env` added.
pub fn spawn_serve(port: u16, api: &str, db_url: &str, env: &[(&str, String)]) -> Child {
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
    cmd.spawn().unwrap()
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
