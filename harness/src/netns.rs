//! Network namespaces for partition tests (root only; `ip` from iproute2).
//!
//! Each host of a `Net` lives in a network namespace of its own, joined by a veth pair to one
//! bridge in the root namespace, where the test process runs and reaches every host at its
//! address on a private /24 (`10.77.S.0/24`: the bridge is `.1`, host `i` is `.10 + i`).
//! `cut(i)` brings host `i`'s end of that veth down: nothing crosses the bridge to or from it
//! (the other hosts and the test process lose it alike) until `heal(i)`. A host can also have a
//! second veth pair straight to the root namespace, on no bridge (`10.78.S.4i+2/30`, "the
//! client path"): clients on the host's side of a cut reach it that way while it is cut off,
//! and nothing else uses it (no host has a route through the root namespace to another).
//!
//! Names are `rlk<pid>x<n>...` (at most 15 characters, the kernel's limit for links), so runs
//! and several nets of one run never collide. Dropping a `Net` kills whatever still runs in its
//! namespaces (processes this run started there) and deletes the namespaces, links and bridge,
//! also when a test panics; `Net::new` first sweeps what a crashed run left (names whose pid no
//! longer runs).

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Every name this module makes starts with this.
const PREFIX: &str = "rlk";

static NEXT_NET: AtomicUsize = AtomicUsize::new(0);

/// Run `ip args...`; its stderr if it fails.
fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `ip args...`, panicking with what `ip` said (set-up steps a test cannot go on without).
fn must(args: &[&str]) {
    if let Err(e) = ip(args) {
        panic!("network set-up failed: {e}");
    }
}

/// Whether this machine can make namespaces (root, `ip netns`), and why not.
pub fn available() -> Result<(), String> {
    // Numbered: tests of one process may probe at once (`--test-threads` above 1).
    static PROBES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = format!("{PREFIX}{}probe{n}", std::process::id());
    ip(&["netns", "add", &probe])?;
    ip(&["netns", "del", &probe]).map(|_| ())
}

/// The pid a name of ours was made by, if it is one of ours.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let tail = &rest[digits.len()..];
    if !tail.starts_with('x') && !tail.starts_with("probe") {
        return None;
    }
    digits.parse().ok()
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Kill (SIGKILL, by pid) whatever runs in namespace `ns`, and wait until it is gone.
fn kill_all_in(ns: &str) {
    for _ in 0..50 {
        let pids: Vec<i32> = ip(&["netns", "pids", ns])
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // SAFETY: kill(2) on a pid that runs inside a namespace of ours.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Delete the namespaces and links of ours whose run is gone (a crashed or killed test).
pub fn sweep_leftovers() {
    let me = std::process::id();
    let stale = |name: &str| owner_pid(name).is_some_and(|pid| pid != me && !alive(pid));
    for line in ip(&["netns", "list"]).unwrap_or_default().lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if stale(name) {
            kill_all_in(name);
            let _ = ip(&["netns", "del", name]);
        }
    }
    for line in ip(&["-o", "link", "show"]).unwrap_or_default().lines() {
        // "7: rlk123x0b: <...>" or "8: rlk123x0h1@if2: <...>"
        let name = line
            .split(':')
            .nth(1)
            .map(str::trim)
            .and_then(|n| n.split('@').next())
            .unwrap_or("");
        if stale(name) {
            let _ = ip(&["link", "del", name]);
        }
    }
}

/// One host of a net: its namespace and addresses.
#[derive(Clone, Debug)]
pub struct Host {
    /// The namespace's name (for `ip netns exec`).
    pub ns: String,
    /// Its address on the bridge: the test process, the other hosts and Sentinel use it.
    pub addr: Ipv4Addr,
    /// Its address on the client path, if it has one (reachable while it is cut off).
    pub client_addr: Option<Ipv4Addr>,
    /// Its veth end on the bridge (root namespace): down while it is cut off.
    link: String,
}

/// Namespaces on a bridge; see the module's documentation.
pub struct Net {
    prefix: String,
    bridge: String,
    subnet: u8,
    pub hosts: Vec<Host>,
}

impl Net {
    /// An empty net: a bridge on a /24 no interface of this machine uses yet.
    pub fn new() -> Self {
        sweep_leftovers();
        let n = NEXT_NET.fetch_add(1, Ordering::Relaxed) % 100;
        let prefix = format!("{PREFIX}{}x{n}", std::process::id());
        let used = ip(&["-o", "-4", "addr", "show"]).unwrap_or_default();
        let start = (std::process::id() as usize + n) % 250;
        let subnet = (0..250)
            .map(|k| ((start + k) % 250 + 1) as u8)
            .find(|s| {
                !used.contains(&format!("10.77.{s}.")) && !used.contains(&format!("10.78.{s}."))
            })
            .expect("a free 10.77.S.0/24 subnet");
        let bridge = format!("{prefix}b");
        // From here on Drop cleans up whatever was made, even if a step below panics.
        let net = Net {
            prefix,
            bridge,
            subnet,
            hosts: Vec::new(),
        };
        must(&["link", "add", &net.bridge, "type", "bridge"]);
        must(&[
            "addr",
            "add",
            &format!("10.77.{subnet}.1/24"),
            "dev",
            &net.bridge,
        ]);
        must(&["link", "set", &net.bridge, "up"]);
        net
    }

    /// Add a host (index `hosts.len()`, at most 10 per net), with a client path if `client_path`.
    pub fn add_host(&mut self, client_path: bool) -> Host {
        let i = self.hosts.len();
        assert!(i < 10, "at most 10 hosts per net (link names)");
        let (p, s) = (&self.prefix, self.subnet);
        let ns = format!("{p}n{i}");
        let addr = Ipv4Addr::new(10, 77, s, 10 + i as u8);
        let link = format!("{p}h{i}");
        let peer = format!("{p}p{i}");
        must(&["netns", "add", &ns]);
        // Recorded at once, so Drop deletes the namespace whatever fails next.
        self.hosts.push(Host {
            ns: ns.clone(),
            addr,
            client_addr: None,
            link: link.clone(),
        });
        must(&["-n", &ns, "link", "set", "lo", "up"]);
        must(&["link", "add", &link, "type", "veth", "peer", "name", &peer]);
        must(&["link", "set", &peer, "netns", &ns]);
        must(&["-n", &ns, "link", "set", &peer, "name", "eth0"]);
        must(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ]);
        must(&["-n", &ns, "link", "set", "eth0", "up"]);
        must(&["link", "set", &link, "master", &self.bridge]);
        must(&["link", "set", &link, "up"]);
        if client_path {
            let (host_end, ns_end) = (format!("{p}c{i}"), format!("{p}d{i}"));
            let near = Ipv4Addr::new(10, 78, s, 4 * i as u8 + 1);
            let far = Ipv4Addr::new(10, 78, s, 4 * i as u8 + 2);
            must(&[
                "link", "add", &host_end, "type", "veth", "peer", "name", &ns_end,
            ]);
            must(&["link", "set", &ns_end, "netns", &ns]);
            must(&["-n", &ns, "link", "set", &ns_end, "name", "eth1"]);
            must(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{far}/30"),
                "dev",
                "eth1",
            ]);
            must(&["-n", &ns, "link", "set", "eth1", "up"]);
            must(&["addr", "add", &format!("{near}/30"), "dev", &host_end]);
            must(&["link", "set", &host_end, "up"]);
            self.hosts[i].client_addr = Some(far);
        }
        self.hosts[i].clone()
    }

    /// A command that runs `program` inside host `i`'s namespace, with `env` set for `program`
    /// only (`ip netns exec NS env K=V program`: `ip` and `env` exec, so the child's pid is the
    /// program's, and signals sent to it reach the program).
    pub fn command(&self, i: usize, env: &[(String, String)], program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.hosts[i].ns, "env"]);
        cmd.args(env.iter().map(|(k, v)| format!("{k}={v}")));
        cmd.arg(program);
        cmd
    }

    /// Cut host `i` off the bridge: packets to and from it are dropped (established
    /// connections hang, new ones time out), except on its client path.
    pub fn cut(&self, i: usize) {
        must(&["link", "set", &self.hosts[i].link, "down"]);
    }

    /// Put host `i` back on the bridge.
    pub fn heal(&self, i: usize) {
        must(&["link", "set", &self.hosts[i].link, "up"]);
    }
}

impl Default for Net {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for host in &self.hosts {
            kill_all_in(&host.ns);
            // Deleting the namespace deletes the veth ends in it, and so their peers.
            let _ = ip(&["netns", "del", &host.ns]);
        }
        for host in &self.hosts {
            let _ = ip(&["link", "del", &host.link]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

#[cfg(test)]
mod tests {
    use super::owner_pid;

    #[test]
    fn names_of_ours_carry_their_pid() {
        assert_eq!(owner_pid("rlk123x0b"), Some(123));
        assert_eq!(owner_pid("rlk123x12n3"), Some(123));
        assert_eq!(owner_pid("rlk77probe"), Some(77));
        assert_eq!(owner_pid("rlkx0b"), None);
        assert_eq!(owner_pid("rlk123b"), None);
        assert_eq!(owner_pid("eth0"), None);
    }
}
