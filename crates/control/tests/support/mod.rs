//! What the control port's hostile-client tests share: a control plane on 127.0.0.1:0 with
//! the given limits, a TLS connection to it without credentials, and a wait for a peer's close.

#![allow(clippy::unwrap_used, dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use hopwise_control::api::{self, Running};
use hopwise_control::client;
use hopwise_control::conn::Limits;
use hopwise_control::plane::{Options, Plane};
use hopwise_control::store::Store;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

pub const MESH: &str = "mesh: { name: shop, trust_domain: shop.local }
services:
  a: { calls: { b: { timeout: 1s } } }
  b: {}
";

/// A running control plane and its state directory.
pub struct Plant {
    pub running: Running,
    /// Its `ca.pem`.
    pub bundle: String,
    pub dir: tempfile::TempDir,
}

impl Plant {
    /// The join token of `service`, from its token file.
    pub fn token(&self, service: &str) -> String {
        let path = self.dir.path().join("tokens").join(service);
        std::fs::read_to_string(path).unwrap().trim().to_owned()
    }

    /// A client as the command line makes it (with the admin token).
    pub async fn client(&self) -> client::Client {
        let addr = self.running.addr.to_string();
        let server = client::Server::from_state(&addr, self.dir.path()).unwrap();
        client::connect(&server).await.unwrap()
    }
}

pub async fn start(limits: Limits) -> Plant {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::first("mesh.yaml", MESH, Duration::from_secs(3600));
    let store = Store::open(dir.path()).unwrap();
    let plane = Plane::start(store, options, SystemTime::now())
        .unwrap()
        .plane;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = api::spawn_with(plane, listener, limits).unwrap();
    let bundle = std::fs::read_to_string(dir.path().join("ca.pem")).unwrap();
    Plant {
        running,
        bundle,
        dir,
    }
}

/// A TLS connection with no client certificate and no token.
pub async fn dial(addr: SocketAddr, bundle: &str) -> std::io::Result<TlsStream<TcpStream>> {
    let config = client::client_config(bundle).unwrap();
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("hopwise-control").unwrap();
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
}

/// Reads until the peer closes (`true`) or 10 s pass (`false`: the test fails, it does not hang).
pub async fn closed(tcp: &mut TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    let wait = async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .is_ok()
}
