//! The service's secrets never show: not in an argument error, not in any way
//! `supervise serve` can fail to start, and its SQLite file is its owner's only.

use std::process::Command;

const CANARY_SECRET: &str = "canary-webhook-secret-7f3a9c1e5b2d4086a1c3e5f7";
const CANARY_KEY: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIcanaryKEYcanaryKEYcanaryKEY0123456789\n-----END RSA PRIVATE KEY-----\n";

fn serve(args: &[&str], env: &[(&str, &str)], dir: &std::path::Path) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_supervise"));
    c.arg("serve")
        .args(args)
        .current_dir(dir)
        .env_remove("GITHUB_WEBHOOK_SECRET")
        .env_remove("GITHUB_PRIVATE_KEY")
        .env_remove("GITHUB_PRIVATE_KEY_PATH")
        .env("SUPERVISE_LOG", "trace")
        .env("SUPERVISE_LISTEN", "127.0.0.1:0");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert!(
        !out.status.success(),
        "serve was expected to refuse to start"
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_clean(said: &str, case: &str) {
    for secret in [CANARY_SECRET, "MIIcanaryKEY", "canary-webhook"] {
        assert!(
            !said.contains(secret),
            "{case}: a secret was printed:\n{said}"
        );
    }
    assert!(!said.is_empty(), "{case}: said nothing");
}

#[test]
fn no_way_of_failing_to_start_prints_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key.pem");
    std::fs::write(&key_file, CANARY_KEY).unwrap();
    let key_path = key_file.to_str().unwrap();
    type Case<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        (
            "secret as a flag",
            vec!["--webhook-secret", CANARY_SECRET, "--app-id", "1"],
            vec![],
        ),
        (
            "key as a flag",
            vec!["--private-key", CANARY_KEY, "--app-id", "1"],
            vec![],
        ),
        (
            "key as a stray argument",
            vec![CANARY_KEY, "--app-id", "1"],
            vec![],
        ),
        (
            "invalid key from the environment",
            vec!["--app-id", "1"],
            vec![
                ("GITHUB_PRIVATE_KEY", CANARY_KEY),
                ("GITHUB_WEBHOOK_SECRET", CANARY_SECRET),
            ],
        ),
        (
            "invalid key from a file",
            vec!["--app-id", "1"],
            vec![
                ("GITHUB_PRIVATE_KEY_PATH", key_path),
                ("GITHUB_WEBHOOK_SECRET", CANARY_SECRET),
            ],
        ),
        (
            "no webhook secret",
            vec!["--app-id", "1"],
            vec![("GITHUB_PRIVATE_KEY", CANARY_KEY)],
        ),
        (
            "no app id",
            vec![],
            vec![
                ("GITHUB_PRIVATE_KEY", CANARY_KEY),
                ("GITHUB_WEBHOOK_SECRET", CANARY_SECRET),
            ],
        ),
        (
            "unreachable database",
            vec!["--app-id", "1"],
            vec![
                ("GITHUB_PRIVATE_KEY", CANARY_KEY),
                ("GITHUB_WEBHOOK_SECRET", CANARY_SECRET),
                ("DATABASE_URL", "postgres://u:p@127.0.0.1:1/x"),
            ],
        ),
        (
            "bad listen address",
            vec!["--app-id", "1", "--listen", "nowhere:-1"],
            vec![
                ("GITHUB_PRIVATE_KEY", CANARY_KEY),
                ("GITHUB_WEBHOOK_SECRET", CANARY_SECRET),
            ],
        ),
    ];
    for (case, args, env) in cases {
        let said = serve(&args, &env, dir.path());
        assert_clean(&said, case);
    }
}

#[cfg(unix)]
#[test]
fn the_sqlite_file_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        supervise::store::sql::SqlStore::connect(&format!("sqlite://{}?mode=rwc", db.display()))
            .await
            .unwrap();
    });
    let mode = std::fs::metadata(&db).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
}

#[test]
fn a_retention_shorter_than_githubs_redelivery_window_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let said = serve(
        &["--app-id", "1"],
        &[
            ("GITHUB_PRIVATE_KEY", CANARY_KEY),
            ("GITHUB_WEBHOOK_SECRET", CANARY_SECRET),
            ("SUPERVISE_DELIVERY_RETENTION_DAYS", "3"),
        ],
        dir.path(),
    );
    assert!(
        said.contains("SUPERVISE_DELIVERY_RETENTION_DAYS is 3") && said.contains("use 7 or more"),
        "{said}"
    );
    assert_clean(&said, "retention too short");
}

/// A secret on the command line is readable by any user of the machine (`ps`,
/// `/proc/<pid>/cmdline`): the database URL (it may hold a password) and the
/// Action's token are taken from the environment or a file only, and the
/// flags that took them once are refused, saying where they go now.
#[test]
fn secrets_are_never_taken_as_flags() {
    for (args, secret) in [
        (["serve", "--database-url"], "postgres://u:PASSWORD@db/x"),
        (["action", "--token"], "ghs_canary"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_supervise"))
            .args(args)
            .arg(secret)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} refused: {err}");
        assert!(err.contains("unexpected argument"), "{err}");
    }
}
