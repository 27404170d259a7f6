//! The I/O edge of capture: `plan.rs`'s commands run with `ip` (iproute2) and `nft`
//! (nftables; `iptables-restore` where `nft` is missing), the hosts file written, and all of
//! it removed again — only names derived from a run's id, so nothing that is not hopwise's is
//! ever touched.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::plan::{Names, Plan, setup};
use crate::error::{LabError, io};
use crate::processes::supervisor::find_program;

/// The programs capture needs, found once.
#[derive(Debug, Clone)]
pub struct Tools {
    pub ip: PathBuf,
    pub rules: Rules,
}

/// What loads the namespace's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rules {
    /// `nft -f -`, the plan's nftables script.
    Nft(PathBuf),
    /// `iptables-restore` and `ip6tables-restore`, the same rules as iptables tables, one
    /// program a family (the package ships both).
    Iptables { v4: PathBuf, v6: PathBuf },
}

/// Set to `nft` or `iptables` to choose what loads the rules; unset: `nft` if installed.
pub const RULES_ENV: &str = "HOPWISE_CAPTURE_RULES";

impl Tools {
    /// `ip`, and `nft` or else `iptables-restore` (or the one [`RULES_ENV`] names), or an error
    /// naming the Debian package that ships what is missing.
    pub fn find() -> Result<Tools, LabError> {
        let need = |program: &str, package: &str| {
            find_program(program).ok_or_else(|| {
                LabError::Failed(format!(
                    "capture needs `{program}` (Debian: apt-get install {package}), and root"
                ))
            })
        };
        let ip = need("ip", "iproute2")?;
        let rules = match std::env::var(RULES_ENV).ok().as_deref() {
            Some("nft") => Rules::Nft(need("nft", "nftables")?),
            Some("iptables") => Rules::Iptables {
                v4: need("iptables-restore", "iptables")?,
                v6: need("ip6tables-restore", "iptables")?,
            },
            Some(other) => {
                return Err(LabError::Failed(format!(
                    "{RULES_ENV}={other}: say `nft` or `iptables`, or leave it unset"
                )));
            }
            None => match (
                find_program("nft"),
                find_program("iptables-restore"),
                find_program("ip6tables-restore"),
            ) {
                (Some(nft), _, _) => Rules::Nft(nft),
                (None, Some(v4), Some(v6)) => Rules::Iptables { v4, v6 },
                (None, _, _) => {
                    return Err(LabError::Failed(
                        "capture needs `nft` (Debian: apt-get install nftables) or \
                         `iptables-restore` and `ip6tables-restore` (apt-get install \
                         iptables), and root"
                            .to_owned(),
                    ));
                }
            },
        };
        Ok(Tools { ip, rules })
    }

    fn ip(&self, args: &[String]) -> Result<(), LabError> {
        run(Command::new(&self.ip).args(args), None)
    }
}

/// Runs a command to its end; its stderr in the error when it fails.
pub(super) fn run(cmd: &mut Command, stdin: Option<&str>) -> Result<(), LabError> {
    let shown = format!("{cmd:?}").replace('"', "");
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io(format!("cannot run {shown}")))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(io(format!("cannot feed {shown}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(io(format!("cannot run {shown}")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(LabError::Failed(format!(
        "{shown} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// Builds the copy's namespace, link, addresses, hosts file and rules. On an error, what was
/// made stays for [`remove`] (the caller's guard) to take away.
pub fn build(plan: &Plan, tools: &Tools) -> Result<(), LabError> {
    for args in setup(plan) {
        tools.ip(&args)?;
    }
    let n = &plan.names;
    // Inbound calls reach an app listening on its loopback: the kernel must route to 127.0.0.1
    // what arrives on the link (this namespace's setting only).
    let localnet = format!("/proc/sys/net/ipv4/conf/{}/route_localnet", n.veth_app);
    let netns = PathBuf::from(n.netns_path());
    hopwise_proxy::capture::in_netns(Some(&netns), || std::fs::write(&localnet, "1"))
        .and_then(|r| r)
        .map_err(io(format!("cannot set {localnet} in {}", n.netns)))?;
    let etc = PathBuf::from(n.etc_dir());
    std::fs::create_dir_all(&etc).map_err(io(format!("cannot create {}", etc.display())))?;
    let hosts = etc.join("hosts");
    std::fs::write(&hosts, &plan.hosts).map_err(io(format!("cannot write {}", hosts.display())))?;
    let load = |program: &Path, args: &[&str], rules: &str| {
        let mut cmd = Command::new(&tools.ip);
        cmd.args(["netns", "exec", &n.netns])
            .arg(program)
            .args(args);
        run(&mut cmd, Some(rules))
    };
    match &tools.rules {
        Rules::Nft(nft) => load(nft, &["-f", "-"], &plan.rules),
        // Both families, or neither: a namespace with IPv4's rules alone would leave IPv6 open.
        Rules::Iptables { v4, v6 } => {
            load(v4, &[], &plan.iptables)?;
            load(v6, &[], &plan.ip6tables)
        }
    }
}

/// Removes everything a run named `names` may have made, whatever is left of it: the processes
/// still inside its namespace, the namespace (its link, addresses, routes and rules go with
/// it), the host's end of the link if it outlived it, the hosts file's directory. Best effort:
/// each step runs even when an earlier one found nothing.
pub fn remove(names: &Names, tools: &Tools) {
    let netns = Path::new(&names.netns_path()).to_owned();
    if netns.exists() {
        kill_inside(names, tools);
        let _ = tools.ip(&["netns".into(), "del".into(), names.netns.clone()]);
    }
    // The kernel frees a namespace, and the link with it, a moment after its last user goes.
    let link = Path::new("/sys/class/net").join(&names.veth_host);
    let start = Instant::now();
    while link.exists() && start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if link.exists() {
        let _ = tools.ip(&["link".into(), "del".into(), names.veth_host.clone()]);
    }
    let _ = std::fs::remove_dir_all(names.etc_dir());
}

/// SIGKILL to every process in the namespace (`ip netns pids`), then waits until they are gone.
fn kill_inside(names: &Names, tools: &Tools) {
    let Ok(out) = Command::new(&tools.ip)
        .args(["netns", "pids", &names.netns])
        .stderr(Stdio::null())
        .output()
    else {
        return;
    };
    let pids: Vec<i32> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    for p in &pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let start = Instant::now();
    while pids
        .iter()
        .any(|p| Path::new(&format!("/proc/{p}")).exists())
        && start.elapsed() < Duration::from_secs(3)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
}
