//! The kubelet's part, for the tests that run injected pods (`kube_pod.rs`, `kube_e2e.rs`): a
//! container's command as the spec names it (environment, downward API, `$(VAR)`, mounts mapped
//! to directories of the test's), the readiness probe, and a pod's network namespace
//! ([`PodNet`]: a veth pair to the test's own namespace, which stands in for the node).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};

pub fn wait_for(what: &str, bound: Duration, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < bound, "{what}: not within {bound:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `GET path` on `addr`, as the kubelet's probe: the status line's code, or 0.
pub fn probe(addr: &str, path: &str) -> u16 {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// One container's command: its environment (values and the downward API's fields of `pod`),
/// its arguments with `$(VAR)` expanded and every mount path moved under `root`, its command's
/// binary (`hopwise` or `hopwise-proxy`) from this build.
pub fn container_command(pod: &Pod, container: &Container, pod_ip: &str, root: &Path) -> Command {
    let mut env = BTreeMap::new();
    for e in container.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => v.clone(),
            (None, Some(from)) => {
                let field = &from.field_ref.as_ref().unwrap().field_path;
                match field.as_str() {
                    "metadata.name" => pod.metadata.name.clone().unwrap(),
                    "metadata.namespace" => pod.metadata.namespace.clone().unwrap(),
                    "spec.serviceAccountName" => pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.service_account_name.clone())
                        .unwrap(),
                    "status.podIP" => pod_ip.to_owned(),
                    other => panic!("a field the stand-in does not know: {other}"),
                }
            }
            (None, None) => String::new(),
        };
        env.insert(e.name.clone(), value);
    }
    let mounts: Vec<(String, PathBuf)> = container
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.mount_path.clone(), root.join(&m.name)))
        .collect();
    let arg = |a: &String| {
        let mut a = a.clone();
        for (name, value) in &env {
            a = a.replace(&format!("$({name})"), value);
        }
        for (path, dir) in &mounts {
            if let Some(rest) = a.strip_prefix(path.as_str()) {
                a = format!("{}{rest}", dir.display());
            }
        }
        a
    };
    let program = match container.command.as_ref().unwrap()[0].as_str() {
        "hopwise-proxy" => env!("CARGO_BIN_EXE_hopwise-proxy"),
        "hopwise" => env!("CARGO_BIN_EXE_hopwise"),
        other => panic!("a command the stand-in does not run: {other}"),
    };
    let mut cmd = Command::new(program);
    cmd.args(container.args.iter().flatten().map(arg)).envs(env);
    cmd
}

/// An injected pod's own containers, started by [`start_injected`].
pub struct Injected {
    pub net: PodNet,
    /// Its projected ServiceAccount token.
    pub token: String,
    pub proxy: super::Proc,
}

/// What the kubelet does for an injected pod before its app, in its network namespace `net`:
/// its projected token and a cache directory the proxy's uid owns (mounts under `root`),
/// `hopwise-init`'s capture rules (as root), then the `hopwise-proxy` sidecar as `proxy_uid`,
/// its stderr to `log`.
pub async fn start_injected(
    kube: &kube::Client,
    pod: &Pod,
    net: PodNet,
    root: &Path,
    log: &Path,
    proxy_uid: u32,
) -> Injected {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let ours = |c: &str| {
        let spec = pod.spec.as_ref().unwrap();
        spec.init_containers
            .iter()
            .flatten()
            .find(|x| x.name == c)
            .unwrap_or_else(|| panic!("{name} was not injected: no {c}"))
    };
    let cache = root.join("hopwise-cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::os::unix::fs::chown(&cache, Some(proxy_uid), Some(proxy_uid)).unwrap();
    let token = project_token(kube, pod, root).await;
    // The init container: the capture rules, loaded in the pod's namespace.
    let init = container_command(pod, ours("hopwise-init"), &net.ip, root);
    let rules = net.run(&init, None).output().unwrap();
    assert!(
        rules.status.success(),
        "{name}'s hopwise-init failed: {}",
        String::from_utf8_lossy(&rules.stderr)
    );
    // The native sidecar, as its uid.
    let proxy = container_command(pod, ours("hopwise-proxy"), &net.ip, root);
    let proxy = super::Proc(
        net.run(&proxy, Some(proxy_uid))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    );
    Injected { net, token, proxy }
}

/// The pod's projected ServiceAccount token, minted as the kubelet mints it (TokenRequest for
/// the projection's audience and lifetime, bound to the pod) and written where its volume is
/// mounted: `root/<volume>/<path>`. Returns the token.
pub async fn project_token(kube: &kube::Client, pod: &Pod, root: &Path) -> String {
    let spec = pod.spec.as_ref().unwrap();
    let (volume, projection) = spec
        .volumes
        .iter()
        .flatten()
        .find_map(|v| {
            let sources = v.projected.as_ref()?.sources.as_ref()?;
            let token = sources
                .iter()
                .find_map(|s| s.service_account_token.clone())?;
            Some((v.name.clone(), token))
        })
        .expect("a projected ServiceAccount token");
    let account = spec.service_account_name.as_deref().unwrap_or("default");
    let token = super::bound_token(
        kube,
        account,
        pod,
        projection.audience.as_deref().unwrap(),
        projection.expiration_seconds,
    )
    .await;
    std::fs::create_dir_all(root.join(&volume)).unwrap();
    std::fs::write(root.join(&volume).join(&projection.path), &token).unwrap();
    token
}

/// A pod's network namespace, linked to the test's own (the node) by a veth pair, dual-stack as
/// a cluster's CNI makes it: `eth0` inside at `10.244.<n>.2/24` and `fd00:10:244:<n>::2/64`, the
/// node's end at `.1` and `::1`, the pod's default routes. Removed with every process in it
/// when dropped.
pub struct PodNet {
    pub netns: String,
    /// Its IP (`status.podIP`): the IPv4 one, or the IPv6 one for [`PodNet::ipv6_first`].
    pub ip: String,
    /// Its IPs (`status.podIPs`), the first `ip`.
    pub ips: [String; 2],
}

impl PodNet {
    /// Pod number `n` (1–254), its IPv4 address first. The caller's thread must be in the
    /// test's own namespace, with forwarding on ([`node`]).
    pub fn new(n: u8) -> PodNet {
        Self::make(n, false)
    }

    /// The same, its IPv6 address first: `status.podIP` is IPv6, as in an IPv6 or an
    /// IPv6-first dual-stack cluster.
    pub fn ipv6_first(n: u8) -> PodNet {
        Self::make(n, true)
    }

    /// `ip:port`, bracketed for IPv6.
    pub fn addr(&self, port: u16) -> String {
        let ip: std::net::IpAddr = self.ip.parse().unwrap();
        std::net::SocketAddr::new(ip, port).to_string()
    }

    fn make(n: u8, ipv6_first: bool) -> PodNet {
        let netns = format!("hwk-{}-{n}", std::process::id());
        let (node_end, v4, v6) = (
            format!("hwk{n}"),
            format!("10.244.{n}.2"),
            format!("fd00:10:244:{n}::2"),
        );
        ip_ok(&["netns", "add", &netns]);
        let ips = if ipv6_first {
            [v6.clone(), v4.clone()]
        } else {
            [v4.clone(), v6.clone()]
        };
        let pod = PodNet {
            netns,
            ip: ips[0].clone(),
            ips,
        };
        let ns = pod.netns.as_str();
        ip_ok(&[
            "link", "add", &node_end, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ]);
        ip_ok(&["addr", "add", &format!("10.244.{n}.1/24"), "dev", &node_end]);
        ip_ok(&["link", "set", &node_end, "up"]);
        ip_ok(&["-n", ns, "link", "set", "lo", "up"]);
        ip_ok(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", "eth0"]);
        // `nodad`: usable at once, not after duplicate address detection's second or two.
        let (v6_node, v6_pod) = (format!("fd00:10:244:{n}::1/64"), format!("{v6}/64"));
        ip_ok(&["-6", "addr", "add", &v6_node, "dev", &node_end, "nodad"]);
        ip_ok(&[
            "-n", ns, "-6", "addr", "add", &v6_pod, "dev", "eth0", "nodad",
        ]);
        ip_ok(&["-n", ns, "link", "set", "eth0", "up"]);
        ip_ok(&[
            "-n",
            ns,
            "route",
            "add",
            "default",
            "via",
            &format!("10.244.{n}.1"),
        ]);
        let via = format!("fd00:10:244:{n}::1");
        ip_ok(&["-n", ns, "-6", "route", "add", "default", "via", &via]);
        pod
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.netns))
    }

    /// `cmd` run inside the pod's namespace (only its network: `nsenter --net`), as `uid`
    /// when given (`setpriv`, the uid's own group, no others).
    pub fn run(&self, cmd: &Command, uid: Option<u32>) -> Command {
        run_in(&self.path(), cmd, uid)
    }
}

/// `cmd` run inside the network namespace at `netns`, as `uid` when given (`PodNet::run`), with
/// `cmd`'s environment alone.
pub fn run_in(netns: &Path, cmd: &Command, uid: Option<u32>) -> Command {
    let mut c = Command::new("nsenter");
    // A container's environment is its spec's, not the test's.
    c.env_clear().env(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    c.arg(format!("--net={}", netns.display())).arg("--");
    if let Some(uid) = uid {
        c.args(["setpriv", "--reuid", &uid.to_string(), "--regid"])
            .arg(uid.to_string())
            .arg("--clear-groups");
    }
    c.arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    c
}

impl Drop for PodNet {
    fn drop(&mut self) {
        let out = Command::new("ip")
            .args(["netns", "pids", &self.netns])
            .output();
        if let Ok(out) = out {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
    }
}

/// Runs `test` on a node of its own: this thread moved into a network namespace of the test's
/// own (needs root), set up as the node ([`node`], `addr` on its loopback), then `test` on a
/// two-thread runtime. What `kube_e2e.rs` and `kube_probes.rs` run their pods beside.
pub fn on_a_node(addr: &str, test: impl std::future::Future<Output = ()>) {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
        .expect("a network namespace of the test's own, the node (needs root)");
    node(addr);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(test);
}

/// The node's part of the network, in the caller thread's namespace (one of the test's own):
/// forwarding between pods, and `addr` on its loopback for what pods reach on the node (the
/// control plane).
fn node(addr: &str) {
    ip_ok(&["link", "set", "lo", "up"]);
    ip_ok(&["addr", "add", &format!("{addr}/32"), "dev", "lo"]);
    // /proc/sys/net is the calling thread's namespace's.
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
        .expect("forwarding in the node's namespace");
    std::fs::write("/proc/sys/net/ipv6/conf/all/forwarding", "1")
        .expect("IPv6 forwarding in the node's namespace");
}

fn ip_ok(args: &[&str]) {
    let s = Command::new("ip").args(args).status().unwrap();
    assert!(s.success(), "ip {args:?} failed");
}
