//! The client side that the command line needs — `hopwise control apply`, `hopwise control
//! rotate-ca` and `hopwise status` — and the text they show. (The proxies' own client, which
//! renews certificates and follows snapshots, is `crates/proxy/src/control.rs`.)
//!
//! Every connection is TLS 1.3 ([`connect`], over `hopwise-api`'s verifier and connector): the
//! server must prove the control plane's identity under the CA bundle given ([`Server`]); admin
//! calls carry the admin token. What the commands print is in `render.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hopwise_api::control_port::ChannelError;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::pb;
use crate::pb::control_client::ControlClient;
use crate::store::{ADMIN_TOKEN_FILE, BUNDLE_FILE};

pub(crate) mod connect;
mod render;

pub use render::{relative, render_apply, render_rotate, render_status, version_text};

/// TLS 1.3 toward a control plane whose certificate chains to a bundle (tests dial with it).
pub use connect::client_config;

/// A connected client.
pub type Client = ControlClient<InterceptedService<Channel, Bearer>>;

/// A control plane to call: where it is, the CA bundle its certificate must chain to, and the
/// admin token (needed by `Apply`, `RotateCa` and `Status` only).
#[derive(Clone)]
pub struct Server {
    /// As given: `host:port` or `https://host:port`.
    pub addr: String,
    bundle_pem: String,
    admin_token: Option<String>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<secret>"),
            )
            .finish_non_exhaustive()
    }
}

impl Server {
    pub fn new(addr: &str, bundle_pem: String, admin_token: Option<String>) -> Server {
        Server {
            addr: addr.to_owned(),
            bundle_pem,
            admin_token,
        }
    }

    /// `addr` with the bundle read from `ca` and, if given, the token from `admin_token`.
    /// Errors name the file and the flag it came from.
    pub fn from_files(
        addr: &str,
        ca: (&Path, &str),
        admin_token: Option<(&Path, &str)>,
    ) -> Result<Server, ClientError> {
        let read = |(path, flag): (&Path, &str)| {
            std::fs::read_to_string(path).map_err(|e| ClientError::File {
                path: path.to_owned(),
                flag: flag.to_owned(),
                reason: e.to_string(),
            })
        };
        let unusable = |(path, flag): (&Path, &str), reason: String| ClientError::File {
            path: path.to_owned(),
            flag: flag.to_owned(),
            reason,
        };
        // Checked here, where the file and flag are known, rather than at the first call.
        let bundle = read(ca)?;
        connect::client_config(&bundle).map_err(|reason| unusable(ca, reason))?;
        let token = match admin_token {
            None => None,
            Some(file) => {
                let token = read(file)?.trim().to_owned();
                if format!("Bearer {token}")
                    .parse::<MetadataValue<Ascii>>()
                    .is_err()
                {
                    return Err(unusable(
                        file,
                        "the admin token is not printable text".into(),
                    ));
                }
                Some(token)
            }
        };
        Ok(Server::new(addr, bundle, token))
    }

    /// `addr` with `DIR/ca.pem` and `DIR/admin-token`, as the control plane writes them.
    pub fn from_state(addr: &str, dir: &Path) -> Result<Server, ClientError> {
        let ca = dir.join(BUNDLE_FILE);
        let token = dir.join(ADMIN_TOKEN_FILE);
        Server::from_files(addr, (&ca, "--state"), Some((&token, "--state")))
    }
}

/// Adds `authorization: Bearer <admin token>` to every call, when there is one.
#[derive(Debug, Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

/// Why a call to the control plane failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("--server {server}: {reason}")]
    Address { server: String, reason: String },
    #[error("cannot read {path} ({flag}): {reason}")]
    File {
        path: PathBuf,
        flag: String,
        reason: String,
    },
    #[error("the CA bundle for --server {server} is not usable: {reason}")]
    Bundle { server: String, reason: String },
    #[error(
        "--server {server}: {missing} FILE is missing; give the control plane's CA bundle \
         (--ca FILE) and admin token (--admin-token FILE), or --state DIR for DIR/ca.pem and \
         DIR/admin-token"
    )]
    NoCredentials {
        server: String,
        missing: &'static str,
    },
    #[error("cannot reach the control plane at {server}: {reason}")]
    Connect { server: String, reason: String },
    #[error("the control plane at {server} answered {code:?}: {message}")]
    Call {
        server: String,
        code: tonic::Code,
        message: String,
    },
}

/// `host:port` from `host:port` or `https://host:port`; `http://` is refused (no plaintext).
pub fn authority(server: &str) -> Result<&str, ClientError> {
    hopwise_api::control_port::authority(server).map_err(|reason| ClientError::Address {
        server: server.to_owned(),
        reason,
    })
}

/// Connects to `server` over TLS, trusting its bundle.
pub async fn connect(server: &Server) -> Result<Client, ClientError> {
    let name = server.addr.as_str();
    let authority = authority(name)?;
    let config =
        connect::client_config(&server.bundle_pem).map_err(|reason| ClientError::Bundle {
            server: name.to_owned(),
            reason,
        })?;
    let channel = hopwise_api::control_port::channel(authority, config, Duration::from_secs(3))
        .await
        .map_err(|e| match e {
            ChannelError::Address(reason) => ClientError::Address {
                server: name.to_owned(),
                reason,
            },
            ChannelError::Connect(reason) => ClientError::Connect {
                server: name.to_owned(),
                reason,
            },
        })?;
    let bearer = match &server.admin_token {
        None => None,
        Some(t) => Some(
            format!("Bearer {t}")
                .parse()
                .map_err(|_| ClientError::Bundle {
                    server: name.to_owned(),
                    reason: "the admin token is not printable text".to_owned(),
                })?,
        ),
    };
    Ok(ControlClient::with_interceptor(channel, Bearer(bearer)))
}

fn call_error(server: &str, s: tonic::Status) -> ClientError {
    ClientError::Call {
        server: server.to_owned(),
        code: s.code(),
        message: s.message().to_owned(),
    }
}

/// Sends a mesh file to be checked and applied.
pub async fn apply(
    server: &Server,
    text: &str,
    file_name: &str,
) -> Result<pb::ApplyResponse, ClientError> {
    let mut client = connect(server).await?;
    client
        .apply(pb::ApplyRequest {
            mesh_yaml: text.to_owned(),
            file_name: file_name.to_owned(),
        })
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| call_error(&server.addr, s))
}

/// Runs one stage of a CA rotation (`add`, `reissue`, `retire`).
pub async fn rotate_ca(
    server: &Server,
    stage: &str,
    force: bool,
) -> Result<pb::RotateCaResponse, ClientError> {
    let mut client = connect(server).await?;
    client
        .rotate_ca(pb::RotateCaRequest {
            stage: stage.to_owned(),
            force,
        })
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| call_error(&server.addr, s))
}

/// Replaces `service`'s join token (`revoke`: the new one is not sent back).
pub async fn token(
    server: &Server,
    service: &str,
    revoke: bool,
) -> Result<pb::TokenResponse, ClientError> {
    let mut client = connect(server).await?;
    client
        .token(pb::TokenRequest {
            service: service.to_owned(),
            revoke,
        })
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| call_error(&server.addr, s))
}

/// Asks for the status.
pub async fn status(server: &Server) -> Result<pb::StatusResponse, ClientError> {
    let mut client = connect(server).await?;
    client
        .status(pb::StatusRequest {})
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| call_error(&server.addr, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unusable CA file or admin token is reported with its path and flag when read, not as
    /// a failure of the first call.
    #[test]
    fn unusable_files_are_named_with_their_flag() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, token) = (dir.path().join("ca.pem"), dir.path().join("admin-token"));
        std::fs::write(&ca, "not a certificate").unwrap();
        let e = Server::from_files("127.0.0.1:7900", (&ca, "--ca"), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&ca.display().to_string()) && e.contains("(--ca)"),
            "{e}"
        );

        let (ca_now, _) = crate::ca::Ca::generate("t", std::time::SystemTime::now()).unwrap();
        let bundle = ca_now.trust_bundle_pem();
        std::fs::write(&ca, bundle).unwrap();
        std::fs::write(&token, "hopwise-admin-\u{7}bell\n").unwrap();
        let e = Server::from_files(
            "127.0.0.1:7900",
            (&ca, "--ca"),
            Some((&token, "--admin-token")),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("admin-token (--admin-token)") && e.contains("not printable"),
            "{e}"
        );
        std::fs::write(&token, "hopwise-admin-0123\n").unwrap();
        let ok = Server::from_files(
            "127.0.0.1:7900",
            (&ca, "--ca"),
            Some((&token, "--admin-token")),
        );
        assert_eq!(
            ok.unwrap().admin_token.as_deref(),
            Some("hopwise-admin-0123")
        );
    }

    #[test]
    fn a_plaintext_server_is_refused_naming_the_flag() {
        assert_eq!(
            authority("https://127.0.0.1:7900").unwrap(),
            "127.0.0.1:7900"
        );
        let e = authority("http://127.0.0.1:7900").unwrap_err().to_string();
        assert!(
            e.contains("--server http://127.0.0.1:7900") && e.contains("TLS only"),
            "{e}"
        );
    }
}
