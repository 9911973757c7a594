//! The fake GitHub's Actions runner runs a workflow's YAML as GitHub does —
//! the runner every story's agent workflow goes through, so what it gets
//! wrong the security stories would cross wrongly: expressions, `if:` on
//! jobs and steps, `needs` results, `GITHUB_OUTPUT` / `GITHUB_ENV` /
//! `GITHUB_PATH`, a clean environment per job, artifacts, and which
//! checkout may push.

mod support;

use std::time::Duration;

const REPO: &str = "acme/shop";

const WORKFLOW: &str = r#"
name: greet
run-name: greet ${{ inputs.who }}
on:
  workflow_dispatch:
    inputs:
      who:
        default: world
permissions: {}
env:
  GREETING: hello
jobs:
  first:
    permissions:
      contents: read
    steps:
      - uses: actions/checkout@v4
        with:
          persist-credentials: false
      - id: say
        run: |
          echo "word=$GREETING ${{ inputs.who }}" >> "$GITHUB_OUTPUT"
          echo "LATER=set by a step" >> "$GITHUB_ENV"
          mkdir -p "$RUNNER_TEMP/bin"
          printf '#!/bin/sh\necho on the path\n' > "$RUNNER_TEMP/bin/tool"
          chmod +x "$RUNNER_TEMP/bin/tool"
          echo "$RUNNER_TEMP/bin" >> "$GITHUB_PATH"
      - name: never, its condition is false
        if: inputs.who == 'nobody'
        run: exit 1
      - if: steps.say.outputs.word == 'HELLO WORLD'
        env:
          SECRET_HERE: ${{ secrets.TOKEN_FOR_STEP }}
        run: |
          mkdir -p "$RUNNER_TEMP/out"
          {
            echo "$LATER"
            tool
            echo "step secret: $SECRET_HERE"
            echo "token in env: ${GITHUB_TOKEN:-none}"
            echo "test env: ${SUPERVISE_FAKE_RUNNER_PROBE:-none}"
            git push -q origin HEAD:refs/heads/pushed-by-a-reader 2>/dev/null && echo "pushed" || echo "push refused"
          } > "$RUNNER_TEMP/out/said"
      - uses: actions/upload-artifact@v4
        with:
          name: said
          path: ${{ runner.temp }}/out
      - name: the same name twice fails the job
        uses: actions/upload-artifact@v4
        with:
          name: said
          path: ${{ runner.temp }}/out
      - name: skipped after the failure
        run: echo ran-after-failure > "$RUNNER_TEMP/out/after"
  second:
    needs: first
    if: ${{ always() && needs.first.result == 'failure' }}
    permissions:
      contents: write
    steps:
      - uses: actions/checkout@v4
      - uses: actions/download-artifact@v4
        with:
          name: said
          path: ${{ github.workspace }}/said
      - run: |
          git add said
          git -c user.name=t -c user.email=t@example.com commit -qm "first: ${{ needs.first.result }}"
          git push -q origin HEAD:refs/heads/seen
  third:
    needs: first
    permissions:
      contents: write
    steps:
      - uses: actions/checkout@v4
      - run: git push -q origin HEAD:refs/heads/third-ran
"#;

#[test]
fn a_workflow_runs_as_github_runs_its_yaml() {
    // Nothing of the test process reaches a job.
    // SAFETY: set while this process has one thread; the runtime's threads
    // are started after it.
    unsafe { std::env::set_var("SUPERVISE_FAKE_RUNNER_PROBE", "leaked") };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(runs_as_github_runs_its_yaml());
}

async fn runs_as_github_runs_its_yaml() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = fake_github::start(fake_github::Config {
        webhook_secret: "s".into(),
        app_id: 42,
        installation_id: 7,
        data_dir: Some(tmp.path().to_path_buf()),
        ..fake_github::Config::default()
    })
    .await;
    fake.ensure_repo(REPO);
    fake.add_file(REPO, "README.md", "hi\n");
    fake.add_token("t");
    let mut setup = fake_github::workflow::Setup::default();
    setup.secrets.insert("TOKEN_FOR_STEP".into(), "s3".into());
    let planned = fake_github::workflow::Planned::new(WORKFLOW, setup).expect("it reads");
    fake.set_workflow_yaml(REPO, "greet.yml", planned);

    let github = supervise::github::GitHub::with_token(
        &fake.url(),
        &secrecy::SecretString::from("t".to_string()),
    )
    .expect("a client");
    let repo = supervise::github::repo::Repo {
        gh: &github,
        installation: 0,
        name: REPO,
    };
    let (id, _) = repo
        .dispatch("greet.yml", "main", serde_json::json!({}))
        .await
        .expect("dispatched")
        .expect("the run's details");
    let run = loop {
        let run = fake
            .runs(REPO)
            .into_iter()
            .find(|r| r.id == id)
            .expect("the run");
        if run.status == "completed" {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        run.display_title, "greet world",
        "run-name, with the input's default"
    );
    // The first job failed (an artifact name taken twice): so does the run.
    assert_eq!(run.conclusion.as_deref(), Some("failure"));

    let bare = tmp.path().join("repos/acme/shop.git");
    let log = support::git(&bare, &["log", "-1", "--format=%s", "seen"]);
    assert_eq!(
        log.trim(),
        "first: failure",
        "the second job saw `needs.first.result`"
    );
    let said = support::git(&bare, &["show", "seen:said/said"]);
    assert_eq!(
        said.lines().collect::<Vec<_>>(),
        [
            "set by a step",
            "on the path",
            "step secret: s3",
            "token in env: none",
            "test env: none",
            "push refused",
        ],
        "what the step saw"
    );
    let after = support::git(&bare, &["ls-tree", "-r", "--name-only", "seen"]);
    assert!(
        !after.contains("said/after"),
        "a step after a failure is skipped: {after}"
    );
    let branches = support::git(&bare, &["branch", "--list"]);
    assert!(!branches.contains("pushed-by-a-reader"), "{branches}");
    assert!(
        !branches.contains("third-ran"),
        "a job whose need failed is skipped without an `if:`: {branches}"
    );
}
