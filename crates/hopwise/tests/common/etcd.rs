//! A real etcd member for the tests of replicas sharing it (`control_etcd.rs`,
//! `control_etcd_secure.rs`): free ports, a data directory that survives a restart, its log,
//! extra flags (TLS), and health read on a plain metrics port so a TLS member is waited for the
//! same way. Also the replicas' store key files.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Proc, free, http_get};

/// The `etcd` binary, or a failure that says how to get it.
pub fn etcd_binary() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("etcd"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "this test needs the `etcd` binary on PATH and did not find it: install it with \
             `apt-get install etcd-server` (Debian; scripts/test does this)"
        )
    })
}

/// One etcd member on free ports, with its data in `<dir>/etcd-data`.
pub struct Etcd {
    pub client: SocketAddr,
    peer: SocketAddr,
    metrics: SocketAddr,
    data: PathBuf,
    log: PathBuf,
    /// `https` when `args` turn TLS on for clients.
    scheme: &'static str,
    args: Vec<String>,
    proc: Option<Proc>,
}

impl Etcd {
    /// Plain HTTP, no authentication.
    pub fn new(dir: &Path) -> Etcd {
        Etcd::with(dir, "http", Vec::new())
    }

    /// Clients on `scheme` (`https` with TLS flags in `args`), with `args` added.
    pub fn with(dir: &Path, scheme: &'static str, args: Vec<String>) -> Etcd {
        let mut e = Etcd {
            client: free(),
            peer: free(),
            metrics: free(),
            data: dir.join("etcd-data"),
            log: dir.join("etcd.log"),
            scheme,
            args,
            proc: None,
        };
        e.start();
        e
    }

    pub fn start(&mut self) {
        let client = format!("{}://{}", self.scheme, self.client);
        let peer = format!("http://{}", self.peer);
        let child = Command::new(etcd_binary())
            .args([
                "--name",
                "hopwise-test",
                "--data-dir",
                self.data.to_str().unwrap(),
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
                "--initial-cluster",
                &format!("hopwise-test={peer}"),
                "--listen-metrics-urls",
                &format!("http://{}", self.metrics),
            ])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.log)
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        self.proc = Some(Proc(child));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !http_get(self.metrics, "/health", "etcd").contains("\"health\":\"true\"") {
            assert!(
                Instant::now() < deadline,
                "etcd did not become healthy; its log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// `--store` for a replica: `etcd://` (or `etcds://`) `<client>/hopwise-test`.
    pub fn url(&self) -> String {
        let scheme = if self.scheme == "https" {
            "etcds"
        } else {
            "etcd"
        };
        format!("{scheme}://{}/hopwise-test", self.client)
    }
}

/// A store key file `<dir>/<name>` (owner-only): 32 bytes of `byte`, as hex.
pub fn store_key(dir: &Path, name: &str, byte: u8) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{byte:02x}").repeat(32)).unwrap();
    owner_only(&path);
    path
}

/// `chmod 600`.
pub fn owner_only(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}
