//! The agent's fence: a network namespace of its own (Linux; it takes
//! `CAP_SYS_ADMIN`, so root or a user who may make namespaces), for
//! `supervise run --sandbox` and for the agent workflow's `supervise fence`.
//! Inside there is only a loopback interface, on which the agent's
//! wrapper (or the fence), from outside, listens twice: a bridge to the model
//! proxy (the agent's only way to its model) and an HTTP proxy that opens
//! connections only to the allowed domains (`network: allowed_domains:`,
//! by default the package registries; `network: off` for none). Everything
//! else has no route; what the proxy refused is counted by host and kept
//! with the attempt (`network.json` in its run directory).
//!
//! The sockets are made inside the namespace by a thread that entered it,
//! and served from outside: a socket stays in the namespace it was made in,
//! whichever thread uses it.

use anyhow::{anyhow, Context, Result};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

pub use crate::settings::{Egress, REGISTRIES};
use crate::sync::LockExt;

/// What the proxy refused during one attempt: host → connections.
pub type Refused = Arc<Mutex<BTreeMap<String, u32>>>;

/// An agent's namespace, with its wrapper serving it.
pub struct Sandbox {
    /// The namespace, for the agent to enter (`setns`) before it starts.
    pub netns: OwnedFd,
    /// The agent's environment: the model's base addresses on the bridge,
    /// and the proxy.
    pub env: Vec<(String, String)>,
    pub refused: Refused,
}

/// Makes the namespace and starts serving it; `model_env` is the attempt's
/// way to the model proxy outside, rewritten to go over the bridge.
pub fn open(egress: &Egress, model_env: &[(String, String)]) -> Result<Sandbox> {
    let made = std::thread::spawn(|| -> Result<(OwnedFd, TcpListener, TcpListener)> {
        // SAFETY: unshare(2) moves only this thread into a new namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(anyhow!(
                "no network namespace for the agent ({}): --sandbox needs root or CAP_SYS_ADMIN",
                std::io::Error::last_os_error()
            ));
        }
        loopback_up()?;
        let ns = std::fs::File::open("/proc/thread-self/ns/net")
            .context("opening the agent's network namespace")?;
        let bridge = TcpListener::bind("127.0.0.1:0")?;
        let proxy = TcpListener::bind("127.0.0.1:0")?;
        Ok((ns.into(), bridge, proxy))
    })
    .join()
    .map_err(|_| anyhow!("the namespace thread panicked"))??;
    let (netns, bridge, proxy) = made;
    let bridge_addr = bridge.local_addr()?;
    let proxy_addr = proxy.local_addr()?;
    // The model proxy's address outside, as the attempt's grant names it.
    let outside = model_env.iter().find_map(|(_, v)| {
        v.strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .and_then(|a| a.parse::<SocketAddr>().ok())
    });
    if let Some(to) = outside {
        std::thread::spawn(move || bridge_to(bridge, to));
    }
    let refused: Refused = Arc::default();
    {
        let (egress, refused) = (egress.clone(), refused.clone());
        std::thread::spawn(move || serve_proxy(proxy, egress, refused));
    }
    let mut env: Vec<(String, String)> = model_env
        .iter()
        .map(|(k, v)| match outside {
            Some(o) => (
                k.clone(),
                v.replace(&o.to_string(), &bridge_addr.to_string()),
            ),
            None => (k.clone(), v.clone()),
        })
        .collect();
    let proxy_url = format!("http://{proxy_addr}");
    for name in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "https_proxy",
        "http_proxy",
        "ALL_PROXY",
    ] {
        env.push((name.into(), proxy_url.clone()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.push((name.into(), "127.0.0.1".into()));
    }
    Ok(Sandbox {
        netns,
        env,
        refused,
    })
}

impl Sandbox {
    /// What was refused, for the attempt's record.
    pub fn refused(&self) -> BTreeMap<String, u32> {
        self.refused.locked().clone()
    }
}

/// The attempt's account of what was refused: `network.json`'s text.
pub fn refusals_json(refused: &BTreeMap<String, u32>) -> Vec<u8> {
    serde_json::to_vec_pretty(&serde_json::json!({ "refused": refused })).unwrap_or_default()
}

/// The line closing an agent's output when something was refused (its
/// record, check run and the decision log quote the output's end).
pub fn refusal_line(refused: &BTreeMap<String, u32>) -> Option<String> {
    if refused.is_empty() {
        return None;
    }
    let listed: Vec<String> = refused.iter().map(|(h, n)| format!("{h} ({n})")).collect();
    Some(format!(
        "{}{}",
        crate::engine::provider::NETWORK_REFUSED,
        listed.join(", ")
    ))
}

/// Brings `lo` up in this thread's namespace (a new one has it down).
fn loopback_up() -> Result<()> {
    // SAFETY: a socket used only for two ioctls on an ifreq we own.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let ok = libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) == 0 && {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req) == 0
        };
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if !ok {
            return Err(anyhow!("bringing up the agent's loopback: {err}"));
        }
    }
    Ok(())
}

/// Each connection to the bridge, carried to the model proxy outside.
fn bridge_to(listener: TcpListener, to: SocketAddr) {
    for conn in listener.incoming().flatten() {
        std::thread::spawn(move || {
            if let Ok(out) = TcpStream::connect(to) {
                splice(conn, out);
            }
        });
    }
}

/// Both directions of two connections, until either ends.
fn splice(a: TcpStream, b: TcpStream) {
    let (Ok(mut a2), Ok(mut b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let (mut a, mut b) = (a, b);
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut a, &mut b2);
        let _ = b2.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut b, &mut a2);
    let _ = a2.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

fn serve_proxy(listener: TcpListener, egress: Egress, refused: Refused) {
    for conn in listener.incoming().flatten() {
        let (egress, refused) = (egress.clone(), refused.clone());
        std::thread::spawn(move || {
            let _ = proxy_one(conn, &egress, &refused);
        });
    }
}

/// One request to the proxy: `CONNECT host:port` opens a tunnel, an
/// absolute `http://host/…` request is passed on, to an allowed host only.
fn proxy_one(conn: TcpStream, egress: &Egress, refused: &Refused) -> Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut head = String::new();
    // The request line and headers, at most 16 KiB.
    loop {
        let mut line = String::new();
        if reader.by_ref().take(16 * 1024).read_line(&mut line)? == 0 {
            return Ok(());
        }
        head.push_str(&line);
        if line == "\r\n" || line == "\n" || head.len() > 16 * 1024 {
            break;
        }
    }
    let mut words = head.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (host, port, tunnel) = if method.eq_ignore_ascii_case("CONNECT") {
        let (h, p) = target.rsplit_once(':').unwrap_or((target, "443"));
        (
            h.trim_matches(['[', ']']).to_string(),
            p.parse().unwrap_or(443),
            true,
        )
    } else {
        let rest = target.strip_prefix("http://").unwrap_or("");
        let authority = rest.split('/').next().unwrap_or("");
        let (h, p) = authority.rsplit_once(':').unwrap_or((authority, "80"));
        (h.to_string(), p.parse().unwrap_or(80), false)
    };
    let mut conn = conn;
    if host.is_empty() || !egress.allows(&host) {
        *refused.locked().entry(host.clone()).or_default() += 1;
        let _ = conn.write_all(
            format!("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\nX-Supervise: {host} is not on the allow-list\r\n\r\n").as_bytes(),
        );
        return Ok(());
    }
    let mut out = TcpStream::connect((host.as_str(), port))?;
    if tunnel {
        conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
    } else {
        out.write_all(head.as_bytes())?;
    }
    // Whatever the reader already took past the head goes on first.
    let buffered = reader.buffer().to_vec();
    if !buffered.is_empty() {
        out.write_all(&buffered)?;
    }
    splice(conn, out);
    Ok(())
}

/// Enters `netns` (for the agent, between fork and exec).
pub fn enter(netns: &OwnedFd) -> std::io::Result<()> {
    // SAFETY: setns(2) on a descriptor we hold; async-signal-safe.
    if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Who a fenced agent runs as: the job's user, never root's groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
}

impl std::str::FromStr for User {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<User, String> {
        let (u, g) = s.split_once(':').unwrap_or((s, s));
        match (u.trim().parse(), g.trim().parse()) {
            (Ok(uid), Ok(gid)) => Ok(User { uid, gid }),
            _ => Err(format!(
                "`{s}` is not UID:GID (as `$(id -u):$(id -g)` gives)"
            )),
        }
    }
}

/// Between fork and exec of the fence's second stage: into the agent's
/// network namespace, and into new PID and mount namespaces, whose first
/// process (the init that stage starts) is their PID 1: everything the
/// agent leaves behind ends with it, and it sees no process outside.
pub fn enter_fenced(netns: &OwnedFd) -> std::io::Result<()> {
    enter(netns)?;
    // SAFETY: unshare(2) with flags only; async-signal-safe.
    if unsafe { libc::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNS) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Between fork and exec of the namespaces' init (their PID 1, still
/// root): a `/proc` of their own, so no process outside is there to read
/// (its environment, command line or memory). Mounts made here stay here.
pub fn become_init() -> std::io::Result<()> {
    let fail = || Err(std::io::Error::last_os_error());
    // SAFETY: mount(2) and prctl(2) with constant strings and plain values;
    // each async-signal-safe.
    unsafe {
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return fail();
        }
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ) != 0
        {
            return fail();
        }
        // Should the fence's outer stage be killed, the namespaces go too.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return fail();
        }
    }
    Ok(())
}

/// The signals a cancelled job's processes are sent, which the fence's
/// stages ignore (so the agent, in their process group, gets them first and
/// may end as it sees fit) and the agent gets back as they were.
pub const CANCEL_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Ignores [`CANCEL_SIGNALS`] in this process (a stage of the fence).
pub fn ignore_cancel_signals() {
    for s in CANCEL_SIGNALS {
        // SAFETY: setting a signal's disposition to "ignore".
        unsafe { libc::signal(s, libc::SIG_IGN) };
    }
}

/// Between fork and exec of the agent, in its namespaces: the cancel
/// signals as a program expects them, no way to gain a privilege again
/// (`sudo` and every set-uid program stop working), and the job's user with
/// no supplementary group (the `docker` group of a hosted runner among
/// them).
pub fn become_agent(user: User) -> std::io::Result<()> {
    let fail = || Err(std::io::Error::last_os_error());
    // SAFETY: signal(2), prctl(2), setgroups(2), setgid(2), setuid(2) with
    // plain values; each async-signal-safe.
    unsafe {
        for s in CANCEL_SIGNALS {
            libc::signal(s, libc::SIG_DFL);
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return fail();
        }
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setgid(user.gid) != 0
            || libc::setuid(user.uid) != 0
        {
            return fail();
        }
        // After the change of user, which clears it: should the init be
        // killed, the agent goes with it.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return fail();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_allows_itself_and_its_subdomains_only() {
        let e = Egress {
            allowed: vec!["npmjs.org".into(), "crates.io.".into()],
        };
        assert!(e.allows("registry.npmjs.org"));
        assert!(e.allows("NPMJS.org"));
        assert!(e.allows("static.crates.io"));
        assert!(!e.allows("evilnpmjs.org"));
        assert!(!e.allows("npmjs.org.evil.com"));
        assert!(!Egress::default().allows("crates.io"));
    }
}
