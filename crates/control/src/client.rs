//! The client side that the command line needs — `hopwise control apply`, `hopwise control
//! rotate-ca` and `hopwise status` — and the text they show. (The proxies' own client, which
//! renews certificates and follows snapshots, is `crates/proxy/src/control.rs`.)
//!
//! Every connection is TLS 1.3 ([`connect`]): the server must prove the control plane's identity
//! under the CA bundle given ([`Server`]); admin calls carry the admin token.

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

/// `3.17`: the 3rd start of the control plane on its state, 17th change since; or `1234`, an
/// etcd revision (replicas sharing a store: the embedded store's start count is never 0).
pub fn version_text(v: u64) -> String {
    if v == 0 {
        "-".to_owned()
    } else if v >> 32 == 0 {
        v.to_string()
    } else {
        format!("{}.{}", v >> 32, v & 0xffff_ffff)
    }
}

/// `in 23h 59m`, `12s ago`.
pub fn relative(target_unix_ms: i64, now_unix_ms: i64) -> String {
    let delta = target_unix_ms - now_unix_ms;
    let d = Duration::from_millis(delta.unsigned_abs());
    let secs = d.as_secs();
    let text = if secs >= 86_400 {
        format!("{}d {}h", secs / 86_400, secs % 86_400 / 3600)
    } else if secs >= 3600 {
        format!("{}h {}m", secs / 3600, secs % 3600 / 60)
    } else if secs >= 60 {
        format!("{}m {}s", secs / 60, secs % 60)
    } else if secs >= 1 {
        format!("{secs}s")
    } else {
        format!("{}ms", d.as_millis())
    };
    if delta >= 0 {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// What `hopwise control apply` prints: the outcome, then the problems or findings.
pub fn render_apply(r: &pb::ApplyResponse) -> String {
    let mut out = String::new();
    for d in &r.diagnostics {
        out.push_str(d);
        out.push('\n');
    }
    // Errors first, then warnings, each group in the order `hopwise check` found them.
    let mut findings: Vec<&pb::Finding> = r.findings.iter().collect();
    findings.sort_by_key(|f| f.severity != "error");
    for f in findings {
        out.push_str(&format!(
            "{:<8} {}  {}: {}\n         fix: {} ({})\n",
            f.severity, f.code, f.subject, f.message, f.fix, f.path
        ));
    }
    if r.applied {
        out.push_str(&format!(
            "{} — version {}\n",
            r.message,
            version_text(r.version)
        ));
    } else {
        out.push_str(&format!("refused: {}\n", r.message));
    }
    out
}

/// What `hopwise control rotate-ca` prints: the outcome, the trust bundle, and the proxies the
/// stage waits for (or went ahead without).
pub fn render_rotate(r: &pb::RotateCaResponse) -> String {
    let mut out = String::new();
    for p in &r.pending {
        out.push_str(&format!(
            "  {} {} ({}): {}\n",
            p.service,
            if p.proxy.is_empty() { "-" } else { &p.proxy },
            match (p.connected, p.replica.as_str()) {
                (false, _) => "stream closed".to_owned(),
                (true, "") => "stream open".to_owned(),
                (true, replica) => format!("stream open on {replica}"),
            },
            p.reason
        ));
    }
    out.push_str(&format!(
        "trust bundle: {} · CA generation {} · rotation {}\n",
        r.trust_bundle.join(", "),
        r.ca_generation,
        if r.rotation.is_empty() {
            "none in progress"
        } else {
            &r.rotation
        }
    ));
    if r.done {
        out.push_str(&format!(
            "{} — version {}\n",
            r.message,
            version_text(r.version)
        ));
    } else {
        out.push_str(&format!("refused: {}\n", r.message));
    }
    out
}

/// What `hopwise status` prints.
pub fn render_status(s: &pb::StatusResponse, now_unix_ms: i64) -> String {
    let mut out = format!(
        "mesh {} · version {} · config version {} · CA expires {}\n",
        s.mesh,
        version_text(s.version),
        s.config_version,
        relative(s.ca_not_after_unix.saturating_mul(1000), now_unix_ms)
    );
    let shared = s.store.starts_with("etcd://");
    if shared {
        out.push_str(&format!(
            "store {} (shared by replicas; versions are etcd revisions; proxies: every replica's)\n",
            s.store
        ));
    }
    if !s.ca_rotation.is_empty() {
        out.push_str(&format!(
            "CA rotation in progress: {} (generation {}); trust bundle: {}\n",
            s.ca_rotation,
            s.ca_generation,
            s.trust_bundle.join(", ")
        ));
    }
    out.push_str("\nproxies\n");
    if s.proxies.is_empty() {
        out.push_str("  (none has subscribed, acknowledged or asked for a certificate yet)\n");
    } else {
        let mut rows = vec![vec![
            "service".to_owned(),
            "proxy".to_owned(),
            "stream".to_owned(),
            "sent".to_owned(),
            "acked".to_owned(),
            "last ack".to_owned(),
            "certificate".to_owned(),
        ]];
        // Replicas: where each stream is open (the embedded store has one place).
        if shared {
            rows[0].insert(3, "replica".to_owned());
        }
        for p in &s.proxies {
            let acked = if p.last_acked_version == 0 {
                "-".to_owned()
            } else if p.last_ack_accepted {
                version_text(p.last_acked_version)
            } else {
                format!(
                    "{} REJECTED: {}",
                    version_text(p.last_acked_version),
                    p.last_ack_reason
                )
            };
            let mut row = vec![
                p.service.clone(),
                if p.proxy.is_empty() {
                    "-".to_owned()
                } else {
                    p.proxy.clone()
                },
                if p.connected { "open" } else { "closed" }.to_owned(),
                version_text(p.last_sent_version),
                acked,
                p.last_ack_unix_ms
                    .map_or("-".to_owned(), |t| relative(t, now_unix_ms)),
                match (p.cert_not_after_unix, p.cert_ca_generation) {
                    (None, None) => "unknown".to_owned(),
                    (None, Some(g)) => format!("CA generation {g}"),
                    (Some(t), g) => {
                        let expiry =
                            format!("expires {}", relative(t.saturating_mul(1000), now_unix_ms));
                        // The generation matters only once the CA has been rotated.
                        match g {
                            Some(g) if s.ca_generation > 1 => format!("{expiry} (CA gen. {g})"),
                            _ => expiry,
                        }
                    }
                },
            ];
            if shared {
                row.insert(
                    3,
                    if p.replica.is_empty() {
                        "-".to_owned()
                    } else {
                        p.replica.clone()
                    },
                );
            }
            rows.push(row);
        }
        out.push_str(&table(&rows));
    }
    out.push_str("\nservices\n");
    for svc in &s.services {
        if svc.external {
            out.push_str(&format!("  {}: outside the mesh\n", svc.service));
            continue;
        }
        let healthy = svc.copies.iter().filter(|c| c.healthy).count();
        out.push_str(&format!(
            "  {}: {} cop{} registered, {healthy} healthy; {} certificate(s) issued{}\n",
            svc.service,
            svc.copies.len(),
            if svc.copies.len() == 1 { "y" } else { "ies" },
            svc.certs_issued,
            svc.cert_not_after_unix.map_or(String::new(), |t| format!(
                ", the last expires {}",
                relative(t.saturating_mul(1000), now_unix_ms)
            )),
        ));
        for c in &svc.copies {
            out.push_str(&format!(
                "    {}  {}  lease {}  expires in {}\n",
                c.inbound_addr,
                if c.healthy { "healthy  " } else { "unhealthy" },
                if shared {
                    format!("{:x}", c.lease_id)
                } else {
                    version_text(c.lease_id)
                },
                relative(i64::try_from(c.expires_in_ms).unwrap_or(i64::MAX), 0)
                    .trim_start_matches("in ")
            ));
        }
    }
    out
}

/// Rows of the same length as columns (the status table has a column more with replicas).
fn table(rows: &[Vec<String>]) -> String {
    let n = rows.first().map_or(0, Vec::len);
    let mut widths = vec![0usize; n];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::from(" ");
        for (i, cell) in row.iter().enumerate() {
            line.push(' ');
            line.push_str(cell);
            if i + 1 < n {
                let width = widths.get(i).copied().unwrap_or(0);
                line.push_str(&" ".repeat(width.saturating_sub(cell.chars().count()) + 1));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
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

    #[test]
    fn versions_and_times_read_well() {
        assert_eq!(version_text((3 << 32) | 17), "3.17");
        assert_eq!(version_text(0), "-");
        assert_eq!(version_text(1234), "1234", "an etcd revision");
        assert_eq!(relative(90_000, 0), "in 1m 30s");
        assert_eq!(relative(0, 12_000), "12s ago");
        assert_eq!(relative(86_400_000 + 7_200_000, 0), "in 1d 2h");
    }

    #[test]
    fn a_refusal_shows_every_finding() {
        let r = pb::ApplyResponse {
            applied: false,
            message: "m.yaml: `hopwise check` finds 1 error(s); nothing was applied".into(),
            findings: vec![pb::Finding {
                code: "retry-fanout".into(),
                severity: "error".into(),
                subject: "frontend → checkout".into(),
                path: "services.frontend".into(),
                message: "27 attempts".into(),
                fix: "retry at one layer".into(),
            }],
            ..Default::default()
        };
        let text = render_apply(&r);
        assert!(text.contains("error    retry-fanout  frontend → checkout: 27 attempts"));
        assert!(
            text.ends_with(
                "refused: m.yaml: `hopwise check` finds 1 error(s); nothing was applied\n"
            )
        );
    }
}
