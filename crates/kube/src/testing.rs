//! A real Kubernetes API server for tests (feature `testing`): [`ApiServer::start`] runs etcd
//! and kube-apiserver — the binaries `scripts/kube-testbin` builds — on free loopback ports,
//! with fresh certificates and envtest's flags, waits until `/readyz` answers, and hands out
//! `kube` clients for it. Dropping it (or [`ApiServer::stop`]) stops the apiserver first, then
//! etcd (SIGTERM, SIGKILL after a bound: an apiserver whose etcd went first takes minutes to
//! exit), reaps both pids and removes the temporary directory. Never a mock, never skipped:
//! without the binaries it is an error naming `scripts/kube-testbin`.
//!
//! The children die with the thread that started them (see `process.rs`): start it from the
//! test's own thread (`#[tokio::test]`'s runtime is), not from a pool thread that may go first.

mod certs;
mod controllers;
mod crds;
mod process;
mod route_crds;

use std::path::Path;
use std::time::Duration;

use kube::config::AuthInfo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub use process::Stop;
use process::{Process, free_port, testbin};

/// How long etcd and kube-apiserver may take to be ready. Measured here: etcd 0.1 to 0.9 s,
/// the apiserver 2.4 to 5.5 s; the bound leaves room for a machine busy with builds.
const ETCD_READY: Duration = Duration::from_secs(30);
const APISERVER_READY: Duration = Duration::from_secs(90);
/// How long each may take to exit on SIGTERM before it is killed (here: the apiserver 1.1 s,
/// etcd 20 ms).
const APISERVER_GRACE: Duration = Duration::from_secs(15);
const ETCD_GRACE: Duration = Duration::from_secs(10);
/// Tries with fresh ports when another process took one between the probe and the bind.
const PORT_TRIES: usize = 3;

/// What can go wrong starting, reaching or stopping a test API server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the Kubernetes test binaries: {0}. Build them with scripts/kube-testbin (scripts/test \
         does), or point KUBE_TESTBIN_DIR at a directory holding etcd and kube-apiserver"
    )]
    Testbin(String),
    #[error("starting {name} under setpriv (util-linux; it ties the child to the test): {source}")]
    Spawn {
        name: &'static str,
        source: std::io::Error,
    },
    #[error("{name} exited before it was ready ({status}); the end of its log:\n{tail}")]
    Exited {
        name: &'static str,
        status: std::process::ExitStatus,
        tail: String,
    },
    #[error("{name} not ready after {bound:?}; the end of its log:\n{tail}")]
    NotReady {
        name: &'static str,
        bound: Duration,
        tail: String,
    },
    #[error("stopping {name} (pid {pid}): {source}")]
    Stop {
        name: &'static str,
        pid: u32,
        source: std::io::Error,
    },
    #[error("making the certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("the kube client: {0}")]
    Client(#[from] kube::Error),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl Error {
    fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// etcd and kube-apiserver running for one test, and what a client needs to reach them.
#[derive(Debug)]
pub struct ApiServer {
    url: String,
    /// The test binaries' directory (kubectl's too).
    bin: std::path::PathBuf,
    certs: certs::Certs,
    // Options so that stopping can take them, in order, once.
    controllers: Option<Process>,
    apiserver: Option<Process>,
    etcd: Option<Process>,
    dir: Option<tempfile::TempDir>,
}

/// The pids of a running test API server's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pids {
    pub etcd: u32,
    pub apiserver: u32,
}

/// How each process ended (`None`: it had not been started).
#[derive(Debug, Clone, Copy)]
pub struct Stopped {
    pub controllers: Option<Stop>,
    pub apiserver: Option<Stop>,
    pub etcd: Option<Stop>,
}

impl ApiServer {
    /// Starts etcd, then kube-apiserver, and returns once `/readyz` answers `ok`.
    pub async fn start() -> Result<Self, Error> {
        let bin = testbin()?;
        let dir = tempfile::Builder::new()
            .prefix("hopwise-kube-")
            .tempdir()
            .map_err(|e| Error::io("making a temporary directory", e))?;
        let certs = certs::write(dir.path())?;
        // Built before the children start, so that an error below stops what did start.
        let mut server = ApiServer {
            url: String::new(),
            bin: bin.clone(),
            certs,
            controllers: None,
            apiserver: None,
            etcd: None,
            dir: None,
        };
        let root = dir.path().to_owned();
        server.dir = Some(dir);

        let etcd_url = server.start_etcd(&bin, &root).await?;
        server.start_apiserver(&bin, &root, &etcd_url).await?;
        Ok(server)
    }

    async fn start_etcd(&mut self, bin: &Path, root: &Path) -> Result<String, Error> {
        let mut tries = 0;
        loop {
            tries += 1;
            let port = free_port()?;
            let url = format!("http://127.0.0.1:{port}");
            let data = root.join(format!("etcd-{tries}"));
            let args = [
                "--data-dir".as_ref(),
                data.as_os_str(),
                "--unsafe-no-fsync".as_ref(),
                "--listen-client-urls".as_ref(),
                url.as_ref(),
                "--advertise-client-urls".as_ref(),
                url.as_ref(),
                "--listen-peer-urls".as_ref(),
                "http://localhost:0".as_ref(),
            ];
            let log = root.join("etcd.log");
            let etcd = self
                .etcd
                .insert(Process::start("etcd", &bin.join("etcd"), args, log)?);
            match etcd.wait_ready(ETCD_READY, || etcd_healthy(port)).await {
                Ok(()) => return Ok(url),
                Err(e) if Process::port_taken(&e) && tries < PORT_TRIES => continue,
                Err(e) => return Err(e),
            }
        }
    }

    async fn start_apiserver(&mut self, bin: &Path, root: &Path, etcd: &str) -> Result<(), Error> {
        let mut tries = 0;
        loop {
            tries += 1;
            let port = free_port()?;
            self.url = format!("https://127.0.0.1:{port}");
            let (port, issuer) = (port.to_string(), format!("{}/", self.url));
            let c = &self.certs;
            let args = [
                "--etcd-servers".as_ref(),
                etcd.as_ref(),
                "--secure-port".as_ref(),
                port.as_ref(),
                "--bind-address".as_ref(),
                "127.0.0.1".as_ref(),
                // Endpoints refuse a loopback address: keep the apiserver from writing its own
                // into default/kubernetes.
                "--advertise-address".as_ref(),
                "127.0.0.1".as_ref(),
                "--endpoint-reconciler-type".as_ref(),
                "none".as_ref(),
                "--cert-dir".as_ref(),
                c.cert_dir.as_os_str(),
                "--client-ca-file".as_ref(),
                c.ca.as_os_str(),
                "--service-account-issuer".as_ref(),
                issuer.as_ref(),
                "--service-account-key-file".as_ref(),
                c.service_account_pub.as_os_str(),
                "--service-account-signing-key-file".as_ref(),
                c.service_account_key.as_os_str(),
                "--authorization-mode".as_ref(),
                "RBAC".as_ref(),
                // Dual-stack: a Service is IPv4 unless it asks for IPv6 (`ipFamilies`).
                "--service-cluster-ip-range".as_ref(),
                "10.96.0.0/24,fd00:96::/112".as_ref(),
                "--allow-privileged".as_ref(),
                // Watches end when it stops, rather than holding it until its request timeout
                // (a minute; the SIGKILL comes first) when a test stops it with one open.
                "--shutdown-watch-termination-grace-period".as_ref(),
                "2s".as_ref(),
                // No controller manager makes ServiceAccounts' tokens yet.
                "--disable-admission-plugins".as_ref(),
                "ServiceAccount".as_ref(),
            ];
            let log = root.join("kube-apiserver.log");
            let program = bin.join("kube-apiserver");
            let mut probe = self.config();
            probe.default_retry = false;
            let client = kube::Client::try_from(probe)?;
            let apiserver =
                self.apiserver
                    .insert(Process::start("kube-apiserver", &program, args, log)?);
            match apiserver
                .wait_ready(APISERVER_READY, || ready(&client))
                .await
            {
                Ok(()) => return Ok(()),
                Err(e) if Process::port_taken(&e) && tries < PORT_TRIES => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The temporary directory: certificates (`ca.crt`, `client.crt`, `client.key`, …) and
    /// each process's log.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(|d| d.path())
    }

    /// The processes' pids.
    pub fn pids(&self) -> Pids {
        let pid = |p: &Option<Process>| p.as_ref().map_or(0, Process::pid);
        Pids {
            etcd: pid(&self.etcd),
            apiserver: pid(&self.apiserver),
        }
    }

    /// A client configuration as user `default` in group `system:masters` (may do anything).
    pub fn config(&self) -> kube::Config {
        let mut config = self.anonymous_config();
        config.auth_info = AuthInfo {
            client_certificate: Some(self.certs.client_cert.display().to_string()),
            client_key: Some(self.certs.client_key.display().to_string()),
            ..AuthInfo::default()
        };
        config
    }

    /// A client configuration that trusts the server and presents no credentials.
    pub fn anonymous_config(&self) -> kube::Config {
        // The URL is ours and well formed; a bad one would fail the first request anyway.
        let url = self.url.parse().unwrap_or_default();
        let mut config = kube::Config::new(url);
        config.root_cert = Some(vec![self.certs.ca_der.clone()]);
        config
    }

    /// The built kubectl, connecting as [`config`](Self::config)'s user (flags, no kubeconfig:
    /// `KUBECONFIG` names a file that does not exist, so no user's configuration applies).
    pub fn kubectl(&self) -> std::process::Command {
        let c = &self.certs;
        let mut cmd = std::process::Command::new(self.bin.join("kubectl"));
        if let Some(dir) = self.dir() {
            cmd.env("KUBECONFIG", dir.join("no-kubeconfig"));
        }
        cmd.arg("--server")
            .arg(&self.url)
            .arg("--certificate-authority")
            .arg(&c.ca)
            .arg("--client-certificate")
            .arg(&c.client_cert)
            .arg("--client-key")
            .arg(&c.client_key);
        cmd
    }

    /// Writes a kubeconfig file for [`config`](Self::config)'s user into the temporary
    /// directory and returns its path: what a process of ours (`hopwise control --kubernetes`)
    /// is given as `KUBECONFIG`.
    pub fn kubeconfig(&self) -> Result<std::path::PathBuf, Error> {
        let dir = self
            .dir()
            .ok_or_else(|| Error::io("the kubeconfig", std::io::ErrorKind::NotFound.into()))?;
        let c = &self.certs;
        let text = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": "test", "cluster": {
                "server": self.url,
                "certificate-authority": c.ca,
            }}],
            "users": [{ "name": "default", "user": {
                "client-certificate": c.client_cert,
                "client-key": c.client_key,
            }}],
            "contexts": [{ "name": "test", "context": { "cluster": "test", "user": "default" } }],
            "current-context": "test",
        });
        let path = dir.join("kubeconfig");
        std::fs::write(&path, text.to_string())
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        Ok(path)
    }

    /// A client of [`config`](Self::config). Needs a Tokio runtime.
    pub fn client(&self) -> Result<kube::Client, Error> {
        Ok(kube::Client::try_from(self.config())?)
    }

    /// Stops the apiserver, then etcd, and removes the directory; says how each ended.
    /// Blocks the thread for about a second (Drop does the same, without the answer).
    pub fn stop(mut self) -> Result<Stopped, Error> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<Stopped, Error> {
        // All are stopped even if one fails; the first error is returned. The controller
        // manager goes first, so it does not log the apiserver's absence at length.
        let controllers = self.controllers.take().map(|p| p.stop(controllers::GRACE));
        let apiserver = self.apiserver.take().map(|p| p.stop(APISERVER_GRACE));
        let etcd = self.etcd.take().map(|p| p.stop(ETCD_GRACE));
        let removed = self.dir.take().map(tempfile::TempDir::close);
        let stopped = Stopped {
            controllers: controllers.transpose()?,
            apiserver: apiserver.transpose()?,
            etcd: etcd.transpose()?,
        };
        removed
            .transpose()
            .map_err(|e| Error::io("removing the temporary directory", e))?;
        Ok(stopped)
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// etcd's `/health` says `true` (plain HTTP on loopback: a request line is all it takes).
async fn etcd_healthy(port: u16) -> bool {
    let probe = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream
            .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        Some(String::from_utf8_lossy(&answer).contains("\"health\":\"true\""))
    };
    let bounded = tokio::time::timeout(Duration::from_secs(2), probe).await;
    matches!(bounded, Ok(Some(true)))
}

/// kube-apiserver's `/readyz` answers `ok`.
async fn ready(client: &kube::Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await;
    matches!(answer, Ok(Ok(text)) if text.trim() == "ok")
}
