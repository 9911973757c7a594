//! The Action's download step (`scripts/install-release`) against a local file
//! server: it installs the asset for this machine after checking its SHA-256,
//! refuses a mismatch (installing nothing), and says "no release" (exit 3, the
//! Action then builds) when there is none.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server(Child, u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(dir: &Path) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "file server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Server(child, port)
}

fn target() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "aarch64-unknown-linux-musl",
        _ => "x86_64-unknown-linux-musl",
    }
}

fn sh(cmd: &str, dir: &Path) {
    assert!(
        Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .current_dir(dir)
            .status()
            .unwrap()
            .success(),
        "{cmd}"
    );
}

fn install(port: u16, release: &str, dest: &Path) -> (i32, String) {
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/install-release"
    ))
    .args(["acme/sprint-supervisor", release])
    .arg(dest)
    .env("SUPERVISE_RELEASE_BASE", format!("http://127.0.0.1:{port}"))
    .output()
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_release_binary_is_installed_only_when_its_checksum_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("releases");
    // Release v1.2.0: this machine's asset, another target's, and SHA256SUMS.
    for (release, corrupt) in [("v1.2.0", false), ("v6.6.6", true)] {
        let dir = root.join(release);
        std::fs::create_dir_all(dir.join("pkg")).unwrap();
        std::fs::write(
            dir.join("pkg/supervise"),
            format!("#!/bin/sh\necho supervise {release}\n"),
        )
        .unwrap();
        sh("chmod +x pkg/supervise", &dir);
        for t in [target(), "aarch64-apple-darwin"] {
            sh(
                &format!("tar -czf supervise-{t}.tar.gz -C pkg supervise"),
                &dir,
            );
        }
        sh("sha256sum supervise-*.tar.gz > SHA256SUMS", &dir);
        if corrupt {
            // The archive is replaced after its checksum was published.
            sh(
                &format!("echo tampered >> supervise-{}.tar.gz", target()),
                &dir,
            );
        }
    }
    let server = serve(&root);

    let dest = tmp.path().join("good");
    let (code, said) = install(server.1, "v1.2.0", &dest);
    assert_eq!(code, 0, "{said}");
    let out = Command::new(dest.join("bin/supervise")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "supervise v1.2.0\n");

    let dest = tmp.path().join("tampered");
    let (code, said) = install(server.1, "v6.6.6", &dest);
    assert_eq!(code, 2, "a mismatch is refused: {said}");
    assert!(said.contains("checksum mismatch"), "{said}");
    assert!(!dest.join("bin/supervise").exists(), "nothing installed");

    let (code, said) = install(server.1, "main", &tmp.path().join("none"));
    assert_eq!(code, 3, "no release: the Action builds instead: {said}");
}
