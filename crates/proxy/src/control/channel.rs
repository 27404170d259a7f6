//! The TLS channel to one control-plane replica, through `hopwise-api`'s one connector: TCP
//! (TCP_NODELAY), then TLS 1.3 with the control plane's identity checked
//! ([`crate::tls::control_client_config`]) under every CA in `--control-ca` and in the last
//! snapshot's trust bundle (the cache's `ca.pem`), so a CA rotation — or a restart after its
//! `retire` — does not cut the proxy off from the control plane.

use std::sync::Arc;

use hopwise_api::control_port;
use rustls::ClientConfig;

use super::pb::control_client::ControlClient;
use super::{ControlError, ControlOptions};
use crate::tls::{self, TlsError};

/// `host:port` of `https://host:port` (or a bare `host:port`); `http://` is refused, naming the
/// flag: the control plane speaks TLS only.
pub fn authority(url: &str) -> Result<&str, ControlError> {
    control_port::authority(url).map_err(|why| ControlError::Address {
        url: url.to_owned(),
        why,
    })
}

/// A client of `server`. `trust_domain`: the mesh's, once a snapshot said it. `present_cert`:
/// offer this proxy's certificate (when it has one on disk).
pub async fn connect(
    opts: &ControlOptions,
    server: &str,
    trust_domain: Option<String>,
    present_cert: bool,
) -> Result<ControlClient<tonic::transport::Channel>, ControlError> {
    let authority = authority(server)?;
    let config = client_config(opts, trust_domain, present_cert)?;
    let channel = control_port::channel(authority, config, std::time::Duration::from_secs(2))
        .await
        .map_err(|e| ControlError::Unreachable {
            server: server.to_owned(),
            reason: e.to_string(),
        })?;
    Ok(ControlClient::new(channel))
}

fn client_config(
    opts: &ControlOptions,
    trust_domain: Option<String>,
    present_cert: bool,
) -> Result<Arc<ClientConfig>, ControlError> {
    let flag = |e: TlsError| ControlError::ControlCa {
        path: opts.control_ca.clone(),
        reason: e.to_string(),
    };
    let mut roots = tls::read_certs(&opts.control_ca).map_err(flag)?;
    let files = opts.cert_files();
    // The last snapshot's bundle, if there was one: not there before the first.
    if let Ok(more) = tls::read_certs(&files.ca) {
        roots.extend(more);
    }
    let client = (present_cert && files.cert.exists() && files.key.exists()).then_some(&files);
    match tls::control_client_config(roots.clone(), trust_domain.clone(), client) {
        Ok(c) => Ok(c),
        // A certificate that cannot be used is not worth failing for: the token authenticates.
        Err(e) if client.is_some() => {
            tracing::warn!("connecting without a client certificate: {e}");
            tls::control_client_config(roots, trust_domain, None).map_err(flag)
        }
        Err(e) => Err(flag(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plaintext_control_url_is_refused_naming_the_flag() {
        assert_eq!(
            authority("https://127.0.0.1:7900").unwrap(),
            "127.0.0.1:7900"
        );
        let e = authority("http://127.0.0.1:7900").unwrap_err().to_string();
        assert!(
            e.contains("--control http://127.0.0.1:7900") && e.contains("TLS"),
            "{e}"
        );
    }
}
