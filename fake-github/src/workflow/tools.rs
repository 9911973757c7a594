//! The network, as far as the workflows the fake runs reach it, stood in by
//! two commands put first on each job's `PATH`:
//!
//! - `curl` serves `raw.githubusercontent.com/<repo>/<ref>/scripts/install-release`
//!   and a release's assets (`github.com/<repo>/releases/download/<tag>/<asset>`:
//!   the `supervise` binary packed as `scripts/install-release` expects it,
//!   with its `SHA256SUMS`) from local files; every other address goes to
//!   the machine's own curl (the fake GitHub's API, a model server here).
//! - `npm install -g <name>@<version>` installs a package the test provided
//!   (its commands linked onto the `PATH`), refusing another version than
//!   the one provided; nothing comes from a registry.
//!
//! Both are plain shell scripts with their paths written in, so a job's
//! environment holds nothing the YAML did not give it.

use super::{quoted, write_executable, Setup};
use std::path::{Path, PathBuf};

/// Writes the stand-ins into `bin`; `npm` links what it installs into
/// `npm_bin` (also on the job's `PATH`, as npm's global prefix is).
pub(crate) fn install(setup: &Setup, bin: &Path, npm_bin: &Path) -> Result<(), String> {
    std::fs::create_dir_all(bin).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(npm_bin).map_err(|e| e.to_string())?;
    let release = match &setup.release {
        Some(binary) => release_dir(binary)?,
        None => PathBuf::from("/nonexistent"),
    };
    let install_release = setup
        .install_release
        .clone()
        .unwrap_or_else(|| PathBuf::from("/nonexistent"));
    let curl = format!(
        r#"#!/bin/sh
# curl on the fake GitHub's runner, standing in for the network (see
# fake-github/src/workflow/tools.rs): install-release and a release's assets
# from local files; any other address through the machine's own curl.
out=- url=
read_args() {{
  while [ $# -gt 0 ]; do
    case "$1" in
      -o|--output) out="$2"; shift 2 ;;
      --retry|--retry-delay|--max-time|-m|-H|--header|-X|-d|--data|-w) shift 2 ;;
      -*) shift ;;
      *) url="$1"; shift ;;
    esac
  done
}}
read_args "$@"
case "$url" in
  https://raw.githubusercontent.com/*/scripts/install-release) src={install} ;;
  https://github.com/*/releases/download/*/*) src={release}/"${{url##*/}}" ;;
  *) [ -n {real} ] && exec {real} "$@"
     echo "curl: (6) Could not resolve host: $(echo "$url" | cut -d/ -f3)" >&2; exit 6 ;;
esac
[ -f "$src" ] || {{ echo "curl: (22) The requested URL returned error: 404" >&2; exit 22; }}
if [ "$out" = - ]; then cat "$src"; else cp "$src" "$out"; fi
"#,
        install = quoted(&install_release.display().to_string()),
        release = quoted(&release.display().to_string()),
        real = quoted(&real_curl().unwrap_or_default()),
    );
    // The job's user may become root while its rule is there, as on
    // GitHub's hosted runners; it never really does, and the machine's own
    // sudo is never reached. `/etc/sudoers.d/` is the job's own directory.
    let sudoers = bin.join("sudoers.d");
    std::fs::create_dir_all(&sudoers).map_err(|e| e.to_string())?;
    std::fs::write(sudoers.join("runner"), "runner ALL=(ALL) NOPASSWD:ALL\n")
        .map_err(|e| e.to_string())?;
    let sudo = format!(
        r#"#!/bin/sh
# sudo on the fake GitHub's runner (see fake-github/src/workflow/tools.rs):
# allowed while a NOPASSWD rule is in its sudoers directory; `rm` of a file
# in /etc/sudoers.d/ removes it there; any other command runs as the job's
# user (this runner never makes anyone root).
rules={rules}
[ "${{1:-}}" = -n ] && shift
[ "${{1:-}}" = -k ] && exit 0
grep -qs NOPASSWD "$rules"/* || {{ echo "sudo: a password is required" >&2; exit 1; }}
if [ "${{1:-}}" = rm ]; then
  shift
  for a in "$@"; do
    case "$a" in /etc/sudoers.d/*) rm -f "$rules/${{a#/etc/sudoers.d/}}" ;; esac
  done
  exit 0
fi
exec "$@"
"#,
        rules = quoted(&sudoers.display().to_string()),
    );
    write_executable(&bin.join("sudo"), &sudo).map_err(|e| e.to_string())?;
    let mut cases = String::new();
    for (name, package) in &setup.packages {
        let links: Vec<String> = package
            .commands
            .iter()
            .map(|c| {
                let file = c
                    .file_name()
                    .map(|f| f.to_string_lossy())
                    .unwrap_or_default();
                format!(
                    "ln -sf {} {}",
                    quoted(&c.display().to_string()),
                    quoted(&npm_bin.join(&*file).display().to_string())
                )
            })
            .collect();
        let version = package.version.as_deref().unwrap_or("");
        cases.push_str(&format!(
            "  {}) have={} ; check ; {} ;;\n",
            quoted(name),
            quoted(version),
            if links.is_empty() {
                ":".to_string()
            } else {
                links.join(" && ")
            }
        ));
    }
    let npm = format!(
        r#"#!/bin/sh
# npm on the fake GitHub's runner, standing in for the registry (see
# fake-github/src/workflow/tools.rs): `npm install -g NAME@VERSION` of a
# package the test provided.
if [ "${{1:-}}" != install ] || [ "${{2:-}}" != -g ] || [ -z "${{3:-}}" ]; then
  echo "npm (the fake runner's): only 'npm install -g NAME@VERSION' is served" >&2
  exit 1
fi
spec="$3"
case "${{spec#?}}" in
  *@*) name="${{spec%@*}}" want="${{spec##*@}}" ;;
  *) name="$spec" want= ;;
esac
check() {{
  if [ -n "$have" ] && [ -n "$want" ] && [ "$have" != "$want" ]; then
    echo "npm ERR! notarget No matching version found for $name@$want (the runner has $have)" >&2
    exit 1
  fi
}}
case "$name" in
{cases}  *) echo "npm ERR! 404 '$name' is not in this registry" >&2; exit 1 ;;
esac
"#,
    );
    for (file, text) in [("curl", curl), ("npm", npm)] {
        let path = bin.join(file);
        write_executable(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The machine's own curl, for every other address (the fake GitHub's API
/// and a model server on this machine, reached as on a runner).
fn real_curl() -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("curl"))
        .find(|c| c.is_file())
        .map(|c| c.display().to_string())
}

/// The release directory serving `binary`: `supervise-<target>.tar.gz` for
/// every target `install-release` knows on Linux, and `SHA256SUMS`. Made
/// once per build of the binary (kept in the temporary directory, keyed by
/// the binary's path, size and time), stripped of debug information so
/// each job's install stays quick.
fn release_dir(binary: &Path) -> Result<PathBuf, String> {
    use std::hash::{Hash, Hasher};
    let meta = std::fs::metadata(binary).map_err(|e| format!("{}: {e}", binary.display()))?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    binary.hash(&mut h);
    meta.len().hash(&mut h);
    meta.modified().ok().hash(&mut h);
    let dir = std::env::temp_dir().join(format!("fake-release-{:016x}", h.finish()));
    // Runs side by side in one process pack it once; processes side by
    // side each in a directory of their own, the first to finish winning.
    static PACKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = PACKING.lock().unwrap_or_else(|e| e.into_inner());
    if dir.join("SHA256SUMS").exists() {
        return Ok(dir);
    }
    let work = std::env::temp_dir().join(format!(
        "fake-release-{:016x}.{}.tmp",
        h.finish(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let script = format!(
        "set -e; cp {bin} supervise; strip --strip-debug supervise 2>/dev/null || true; \
         tar -cf - supervise | gzip -1 > asset.tar.gz; rm supervise; \
         for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do \
           cp asset.tar.gz supervise-$t.tar.gz; done; rm asset.tar.gz; \
         sha256sum supervise-*.tar.gz > SHA256SUMS",
        bin = quoted(&binary.display().to_string())
    );
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(&work)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "packing {} as a release: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // Another process may have made it meanwhile: either copy is whole.
    if std::fs::rename(&work, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&work);
    }
    if dir.join("SHA256SUMS").exists() {
        Ok(dir)
    } else {
        Err(format!("the release of {} was not made", binary.display()))
    }
}
