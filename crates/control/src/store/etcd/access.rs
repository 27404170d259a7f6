//! How a replica gets into etcd beyond its address: TLS (`etcds://`, the CA that etcd's
//! certificate must chain to, and a client certificate when etcd asks for one) and etcd's own
//! authentication (a user and its password). The files are read by the command line
//! (`cli/etcd.rs`); this holds their contents, never shows a key or a password in `Debug`, and
//! turns etcd's terse refusals into a hint naming the flag that is missing or wrong. Pure.

use crate::store::{Secret, StoreError};

/// TLS to etcd: the trust anchors, and the client certificate (PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct Tls {
    pub ca_pem: String,
    /// Certificate chain and private key, for etcd's `--client-cert-auth`.
    pub client: Option<(String, Secret)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("client_cert", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

/// Everything but the address that a connection to etcd needs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// `Some` with `etcds://`.
    pub tls: Option<Tls>,
    /// etcd's authentication: user name and password.
    pub user: Option<(String, Secret)>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("tls", &self.tls.is_some())
            .field(
                "client_cert",
                &self.tls.as_ref().is_some_and(|t| t.client.is_some()),
            )
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

/// What to add to etcd's (or the TLS layer's) words about a failure: which flag to look at.
pub fn hint(message: &str) -> Option<&'static str> {
    let m = message.to_ascii_lowercase();
    let hints: [(&[&str], &str); 6] = [
        (
            &[
                "certificaterequired",
                "certificate required",
                "badcertificate",
                "bad certificate",
            ],
            "etcd wants a client certificate it trusts: --etcd-cert and --etcd-key",
        ),
        (
            &[
                "unknownissuer",
                "unknown issuer",
                "invalid peer certificate",
            ],
            "etcd's certificate does not chain to --etcd-ca (or does not name the address in --store)",
        ),
        (
            &["authentication failed"],
            "etcd refused the user name or the password: --etcd-user, --etcd-password-file",
        ),
        (
            &[
                "user name is empty",
                "invalid auth token",
                "user name not found",
            ],
            "etcd has authentication on: --etcd-user and --etcd-password-file",
        ),
        (
            &["permission denied"],
            "the etcd user lacks read-write access to the prefix (an etcd role grants it)",
        ),
        (
            &[
                "corrupt message",
                "invalid http version",
                "frame with invalid size",
                "unexpected eof",
                "tls handshake eof",
            ],
            "TLS on one side only? etcds:// speaks TLS, etcd:// plain HTTP, and etcd listens with one of them",
        ),
    ];
    hints
        .iter()
        .find(|(needles, _)| needles.iter().any(|n| m.contains(n)))
        .map(|(_, h)| *h)
}

/// A first read that failed on a TLS connection etcd closed, from a replica that presents no
/// client certificate: with TLS 1.3 the refusal of a missing certificate comes after the
/// handshake, so all the client sees is a closed connection. Says what is most likely.
pub fn without_client_cert(e: StoreError, access: &Access) -> StoreError {
    let bare = access.tls.as_ref().is_some_and(|t| t.client.is_none());
    match e {
        StoreError::Etcd { url, reason }
            if bare
                && [
                    "connection closed",
                    "canceled",
                    "broken pipe",
                    "reset by peer",
                ]
                .iter()
                .any(|m| reason.contains(m)) =>
        {
            StoreError::Etcd {
                url,
                reason: format!(
                    "{reason} (etcd closed the connection: if it runs with --client-cert-auth, it wants a client certificate: --etcd-cert and --etcd-key)"
                ),
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_flag() {
        let cases = [
            (
                "transport error: received fatal alert: CertificateRequired",
                "--etcd-cert",
            ),
            (
                "error: \"received fatal alert: BadCertificate\" })): connection error",
                "--etcd-cert",
            ),
            ("invalid peer certificate: UnknownIssuer", "--etcd-ca"),
            (
                "status: InvalidArgument, message: \"etcdserver: authentication failed, invalid user ID or password\"",
                "--etcd-password-file",
            ),
            ("etcdserver: user name is empty", "--etcd-user"),
            ("etcdserver: permission denied", "role"),
        ];
        for (message, flag) in cases {
            let h = hint(message).unwrap_or_else(|| panic!("no hint for {message}"));
            assert!(h.contains(flag), "{message}: {h}");
        }
        assert_eq!(hint("etcdserver: request timed out"), None);
    }

    #[test]
    fn a_closed_connection_without_a_client_certificate_suggests_one() {
        let closed = || StoreError::Etcd {
            url: "etcds://x:1".into(),
            reason: "hyper::Error(Canceled, \"connection closed\")".into(),
        };
        let tls = |client| Access {
            tls: Some(Tls {
                ca_pem: "CA".into(),
                client,
            }),
            user: None,
        };
        let bare = without_client_cert(closed(), &tls(None)).to_string();
        assert!(bare.contains("--etcd-cert"), "{bare}");
        let with_cert = tls(Some(("C".into(), Secret("K".into()))));
        let text = without_client_cert(closed(), &with_cert).to_string();
        assert!(!text.contains("--etcd-cert"), "{text}");
    }

    #[test]
    fn debug_shows_no_password_or_key() {
        let access = Access {
            tls: Some(Tls {
                ca_pem: "CA".into(),
                client: Some(("CERT".into(), Secret("THE-KEY".into()))),
            }),
            user: Some(("hopwise".into(), Secret("THE-PASSWORD".into()))),
        };
        let text = format!("{access:?}");
        assert!(
            !text.contains("THE-KEY") && !text.contains("THE-PASSWORD"),
            "{text}"
        );
        assert!(text.contains("hopwise"), "{text}");
    }
}
