//! Which admin address a proxy may name for itself (`RegisterRequest.admin_addr`,
//! `SubscribeRequest.admin_addr`): the dashboard reads `/metrics` there every second, so an
//! address the caller could point anywhere would make the control plane scan or hammer any host
//! for whoever holds a join token. Accepted: the IP the proxy's connection comes from, or a
//! loopback address when it connects from loopback too. Pure: the caller passes that IP.

use std::net::{IpAddr, SocketAddr};

use super::ApiError;

/// The admin address `text` sent over a connection from `from` (`None`: not known, so nothing
/// is accepted): `ip:port`, port not 0 ([`ApiError::BadAddress`] otherwise); an unspecified IP
/// (the admin endpoint listens on every address) is read as `from`. Another host's address is
/// [`ApiError::ForeignAdmin`].
pub fn admin_addr(text: &str, from: Option<IpAddr>) -> Result<SocketAddr, ApiError> {
    let mut addr: SocketAddr = text
        .trim()
        .parse()
        .map_err(|_| ApiError::BadAddress(text.to_owned()))?;
    if addr.port() == 0 {
        return Err(ApiError::BadAddress(text.to_owned()));
    }
    let foreign = || ApiError::ForeignAdmin {
        addr: text.trim().to_owned(),
        from: from.map_or_else(|| "an unknown address".to_owned(), |ip| ip.to_string()),
    };
    let from = from.map(|ip| ip.to_canonical()).ok_or_else(foreign)?;
    if addr.ip().is_unspecified() {
        addr.set_ip(from);
    }
    let ip = addr.ip().to_canonical();
    if ip == from || (ip.is_loopback() && from.is_loopback()) {
        addr.set_ip(ip);
        Ok(addr)
    } else {
        Err(foreign())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    fn ok(text: &str, from: &str) -> String {
        admin_addr(text, ip(from)).unwrap().to_string()
    }

    fn foreign(text: &str, from: Option<IpAddr>) -> bool {
        matches!(admin_addr(text, from), Err(ApiError::ForeignAdmin { .. }))
    }

    #[test]
    fn the_callers_own_address_or_loopback_from_loopback() {
        assert_eq!(ok("10.0.0.7:9901", "10.0.0.7"), "10.0.0.7:9901");
        assert_eq!(ok("127.0.0.1:9901", "127.0.0.1"), "127.0.0.1:9901");
        assert_eq!(ok("127.0.0.2:9901", "127.0.0.1"), "127.0.0.2:9901");
        assert_eq!(ok("[::1]:9901", "127.0.0.1"), "[::1]:9901");
        // Listening on every address: read where the proxy is.
        assert_eq!(ok("0.0.0.0:9901", "10.0.0.7"), "10.0.0.7:9901");
        assert_eq!(ok("0.0.0.0:9901", "127.0.0.1"), "127.0.0.1:9901");
        // A dual-stack listener sees IPv4 callers as mapped addresses.
        assert_eq!(ok("10.0.0.7:9901", "::ffff:10.0.0.7"), "10.0.0.7:9901");
    }

    #[test]
    fn another_hosts_address_is_foreign() {
        assert!(foreign("10.0.0.8:9901", ip("10.0.0.7")));
        assert!(foreign("169.254.169.254:80", ip("10.0.0.7")));
        // Loopback from a remote proxy would be the control plane's own host.
        assert!(foreign("127.0.0.1:9901", ip("10.0.0.7")));
        assert!(foreign("10.0.0.7:9901", ip("127.0.0.1")));
        // Where the call comes from is unknown: nothing is accepted.
        assert!(foreign("127.0.0.1:9901", None));
        let message = admin_addr("10.0.0.8:9901", ip("10.0.0.7"))
            .unwrap_err()
            .to_string();
        assert!(message.contains("10.0.0.8:9901"), "{message}");
        assert!(message.contains("10.0.0.7"), "{message}");
    }

    #[test]
    fn not_an_address_or_port_zero_is_bad() {
        for text in ["pricing", "127.0.0.1:0", "127.0.0.1", ""] {
            assert!(
                matches!(
                    admin_addr(text, ip("127.0.0.1")),
                    Err(ApiError::BadAddress(_))
                ),
                "{text}"
            );
        }
    }
}
