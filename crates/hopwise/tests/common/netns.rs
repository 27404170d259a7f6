//! A network namespace of a test's own standing in for the host (`Host`), for the tests that
//! run capture for real as root (`capture.rs`, `up_captured.rs`): everything they start runs
//! inside it, so every address they use is assigned inside namespaces the test made.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

pub const HOPWISE: &str = env!("CARGO_BIN_EXE_hopwise");

/// What these tests need of the machine, or a failure naming the Debian package.
pub fn need_tools() {
    let tools = [
        ("ip", "iproute2"),
        ("nft", "nftables"),
        ("curl", "curl"),
        ("nsenter", "util-linux"),
    ];
    for (program, package) in tools {
        let found = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .any(|d| Path::new(d).join(program).exists());
        assert!(found, "`{program}` is missing: apt-get install {package}");
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1));
    assert_eq!(
        euid,
        Some("0"),
        "capture makes network namespaces: run as root"
    );
}

/// A network namespace of the test's own standing in for the host; on drop every process
/// still inside it is killed and it is deleted.
pub struct Host {
    pub name: String,
}

impl Host {
    pub fn new() -> Host {
        need_tools();
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "hwtest-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        Host { name }
    }

    /// `hopwise ARGS` inside this namespace. `nsenter` joins the network namespace alone:
    /// `ip netns exec` would also give it a mount namespace of its own, hiding the namespaces
    /// `hopwise run` mounts under /run/netns from everyone else, as they never are on a host.
    pub fn hopwise(&self, args: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.name))
            .arg(HOPWISE)
            .args(args);
        c
    }

    /// The interfaces in this namespace, by name.
    pub fn links(&self) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.name, "-o", "link", "show"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Binds a listener inside this namespace.
    pub fn listen(&self, addr: &str) -> std::net::TcpListener {
        let path = PathBuf::from(format!("/run/netns/{}", self.name));
        hopwise_proxy::capture::in_netns(Some(&path), || std::net::TcpListener::bind(addr))
            .unwrap()
            .unwrap()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let out = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output();
        if let Ok(out) = out {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

pub fn ip(args: &[&str]) {
    let s = Command::new("ip").args(args).status().unwrap();
    assert!(s.success(), "ip {args:?} failed");
}
