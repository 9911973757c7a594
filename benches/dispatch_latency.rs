//! The local supervisor's own overhead: from one agent's exit to the next sprint's
//! agent start, on a one-unit plan of 30 sprints. The agent stamps the clock when
//! it starts and just before it exits; the gap covers verification, git evidence,
//! the decision, the fsynced log write, the merge, the next worktree and the spawn.
//! (The seeds' supervisor polled every 5 s.) Run: `cargo bench --bench dispatch_latency`;
//! `BENCH_REPO_FILES=N` adds N files of about 1 KB to the repository, as a real
//! project's would be (default: none, the plan alone).

use std::process::Command;

const SPRINTS: usize = 30;

/// Who commits, for the set-up and for the agents.
const GIT_IDENTITY: [(&str, &str); 4] = [
    ("GIT_AUTHOR_NAME", "b"),
    ("GIT_AUTHOR_EMAIL", "b@x"),
    ("GIT_COMMITTER_NAME", "b"),
    ("GIT_COMMITTER_EMAIL", "b@x"),
];

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` lists benchmarks; nothing to list here
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    std::fs::create_dir_all(&root).unwrap();
    let mut plan = String::from("# Latency\n\n");
    for n in 1..=SPRINTS {
        plan.push_str(&format!(
            "## Sprint {n}: Implement step {n}\n- [ ] `step-{n}.txt` exists\n\n"
        ));
    }
    std::fs::write(root.join("EXECUTION_PLAN.md"), plan).unwrap();
    let files: usize = std::env::var("BENCH_REPO_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    for n in 0..files {
        // A hundred to a directory, as source trees spread them.
        let dir = root.join(format!("src/m{}", n / 100));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("f{n}.rs")),
            format!("// {n}\n").repeat(128),
        )
        .unwrap();
    }
    let stamps = tmp.path().join("stamps");
    let agent = tmp.path().join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            // bash's clock is read without starting a process (`date` would
            // add its own start-up to both ends of every gap).
            "#!/bin/bash\necho \"start $SUPERVISE_SPRINT ${{EPOCHREALTIME/./}}\" >> {s}\necho x > step-$SUPERVISE_SPRINT.txt\ngit add -A && git commit -qm s$SUPERVISE_SPRINT\necho \"end $SUPERVISE_SPRINT ${{EPOCHREALTIME/./}}\" >> {s}\n",
            s = stamps.display()
        ),
    )
    .unwrap();
    let git = |args: &[&str]| {
        assert!(Command::new("git")
            .args(args)
            .current_dir(&root)
            .envs(GIT_IDENTITY)
            .status()
            .unwrap()
            .success());
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "plan"]);
    let status = Command::new(env!("CARGO_BIN_EXE_supervise"))
        .args([
            "run",
            "--quiet",
            "--agent",
            &format!("bash {}", agent.display()),
        ])
        .current_dir(&root)
        .envs(GIT_IDENTITY)
        .status()
        .unwrap();
    assert!(status.success(), "the run failed: {status:?}");
    let text = std::fs::read_to_string(&stamps).unwrap();
    let stamp = |kind: &str, n: usize| -> u64 {
        text.lines()
            .find_map(|l| {
                let mut w = l.split(' ');
                (w.next() == Some(kind) && w.next() == Some(&n.to_string()))
                    .then(|| w.next().unwrap().parse().unwrap())
            })
            .unwrap()
    };
    let mut gaps: Vec<f64> = (1..SPRINTS)
        .map(|n| (stamp("start", n + 1) - stamp("end", n)) as f64 / 1e3)
        .collect();
    gaps.sort_by(f64::total_cmp);
    let pct = |p: f64| gaps[((gaps.len() - 1) as f64 * p).round() as usize];
    println!("agent exit -> next agent start over {} transitions ({files} files besides the plan): p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms", gaps.len(), pct(0.5), pct(0.9), gaps[gaps.len() - 1]);
}
