//! kube-controller-manager beside a test's API server, running only the controllers a test
//! names (the EndpointSlice controller, say): what publishes the EndpointSlices of Services
//! whose pods a test made ready, as it does in a cluster.

use std::path::Path;
use std::time::Duration;

use tokio::net::TcpStream;

use super::process::{Process, free_port};
use super::{ApiServer, Error};

/// How long the controller manager may take to listen (it starts its informers meanwhile).
const READY: Duration = Duration::from_secs(60);
/// How long it may take to exit on SIGTERM.
pub(super) const GRACE: Duration = Duration::from_secs(10);

impl ApiServer {
    /// Starts kube-controller-manager with `controllers` only (`--controllers`), connecting as
    /// [`config`](Self::config)'s user, and returns once it listens. Stopped with the server,
    /// first. Pods still stay Pending (no scheduler, no kubelet): a test patches their status.
    pub async fn start_controllers(&mut self, controllers: &[&str]) -> Result<(), Error> {
        let kubeconfig = self.kubeconfig()?;
        let root = self
            .dir()
            .ok_or_else(|| Error::io("the directory", std::io::ErrorKind::NotFound.into()))?
            .to_owned();
        let port = free_port()?;
        let (port_arg, list) = (port.to_string(), controllers.join(","));
        let key = self.certs.service_account_key.clone();
        let certs = root.join("kube-controller-manager");
        let args: [&std::ffi::OsStr; 14] = [
            "--kubeconfig".as_ref(),
            kubeconfig.as_os_str(),
            "--leader-elect=false".as_ref(),
            "--controllers".as_ref(),
            list.as_ref(),
            "--bind-address".as_ref(),
            "127.0.0.1".as_ref(),
            "--secure-port".as_ref(),
            port_arg.as_ref(),
            "--service-account-private-key-file".as_ref(),
            key.as_os_str(),
            // Its serving certificate, self-signed, in the test's directory (not /var/run).
            "--cert-dir".as_ref(),
            certs.as_os_str(),
            // It needs no delegated authentication of its own callers here.
            "--authentication-skip-lookup".as_ref(),
        ];
        let program = self.bin.join("kube-controller-manager");
        let log = root.join("kube-controller-manager.log");
        let process = Process::start("kube-controller-manager", &program, args, log)?;
        let process = self.controllers.insert(process);
        process.wait_ready(READY, || listening(port)).await
    }

    /// Where the controller manager's log is, for a test that failed to say why.
    pub fn controllers_log(&self) -> Option<std::path::PathBuf> {
        self.dir()
            .map(|d: &Path| d.join("kube-controller-manager.log"))
    }
}

async fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).await.is_ok()
}
