//! The control port as its clients see it: the address they are given (`https://HOST:PORT`, or
//! `HOST:PORT`; never `http://`, the port is TLS only), the identity the server must present,
//! `spiffe://<trust-domain>/control` ([`check_control_identity`]), and the TLS that checks it:
//! one certificate verifier ([`verify`]) and one connector ([`connect`]). The proxy's client and
//! the control plane's own (command line, lab, bench) both use them, so they cannot drift.

pub mod connect;
pub mod verify;

pub use connect::{ChannelError, Connector, channel, source_chain};
pub use hopwise_model::control_port::{CONTROL_PATH, control_identity};
pub use verify::{ClientConfigError, ControlPlane, ControlVerifier, client_config};

/// Whether `id` (a server certificate's URI SAN) is a control plane's: a SPIFFE id whose path is
/// exactly `/control`, in `trust_domain` when it is known. The error says what was found.
pub fn check_control_identity(id: &str, trust_domain: Option<&str>) -> Result<(), String> {
    let Some(rest) = id.strip_prefix("spiffe://") else {
        return Err(format!("the server is `{id}`, not a SPIFFE id"));
    };
    let (domain, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if path != CONTROL_PATH {
        return Err(format!(
            "the server is {id}, not a control plane (its path must be {CONTROL_PATH})"
        ));
    }
    match trust_domain {
        Some(expected) if expected != domain => Err(format!(
            "the server is {id}, a control plane of trust domain `{domain}`, not `{expected}`"
        )),
        _ if domain.is_empty() => Err(format!("the server is {id}: no trust domain")),
        _ => Ok(()),
    }
}

/// `HOST:PORT` of `https://HOST:PORT` or `HOST:PORT`. The error says what is wrong (the caller
/// names its flag).
pub fn authority(url: &str) -> Result<&str, String> {
    let rest = match url.split_once("://") {
        None => url,
        Some(("https", rest)) => rest,
        Some(("http", _)) => {
            return Err(
                "the control plane speaks TLS only: write https://HOST:PORT or HOST:PORT".into(),
            );
        }
        Some((scheme, _)) => return Err(format!("`{scheme}://` is not https://")),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() || rest.contains('/') || !rest.contains(':') {
        return Err("write https://HOST:PORT or HOST:PORT, e.g. 127.0.0.1:7900".into());
    }
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_port_over_tls() {
        assert_eq!(authority("127.0.0.1:7900").unwrap(), "127.0.0.1:7900");
        assert_eq!(
            authority("https://10.0.0.7:7900/").unwrap(),
            "10.0.0.7:7900"
        );
        assert_eq!(authority("https://[::1]:7900").unwrap(), "[::1]:7900");
        assert!(
            authority("http://127.0.0.1:7900")
                .unwrap_err()
                .contains("TLS only")
        );
        for bad in ["127.0.0.1", "https://", "grpc://x:1", "https://x:1/path"] {
            assert!(authority(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_the_control_path_of_the_right_domain_passes() {
        assert_eq!(
            control_identity("shop.local"),
            "spiffe://shop.local/control"
        );
        assert!(check_control_identity("spiffe://shop.local/control", None).is_ok());
        assert!(check_control_identity("spiffe://shop.local/control", Some("shop.local")).is_ok());
        for (id, domain, says) in [
            ("spiffe://shop.local/service/b", None, "not a control plane"),
            ("spiffe://shop.local/control/x", None, "not a control plane"),
            ("spiffe://shop.local/controls", None, "not a control plane"),
            ("spiffe://shop.local", None, "not a control plane"),
            ("https://shop.local/control", None, "not a SPIFFE id"),
            ("spiffe:///control", None, "no trust domain"),
            (
                "spiffe://other/control",
                Some("shop.local"),
                "not `shop.local`",
            ),
        ] {
            let e = check_control_identity(id, domain).unwrap_err();
            assert!(e.contains(says), "{id}: {e}");
        }
    }
}
