//! Where a copy takes calls (`RegisterRequest.inbound_addr`): the address every other proxy of
//! the mesh is told to dial, so one they cannot reach from where they are is refused. Pure.

use std::net::SocketAddr;

use super::ApiError;

/// The inbound address `text` names: `ip:port` (surrounding whitespace ignored), port not 0,
/// the IP not unspecified — in any spelling: `::ffff:0.0.0.0` is 0.0.0.0 too, and a proxy
/// dialling either reaches its own host, not the copy. [`ApiError::BadAddress`] otherwise.
pub fn inbound_addr(text: &str) -> Result<SocketAddr, ApiError> {
    let addr: SocketAddr = text
        .trim()
        .parse()
        .map_err(|_| ApiError::BadAddress(text.to_owned()))?;
    if addr.ip().to_canonical().is_unspecified() || addr.port() == 0 {
        return Err(ApiError::BadAddress(text.to_owned()));
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(text: &str) -> bool {
        matches!(inbound_addr(text), Err(ApiError::BadAddress(t)) if t == text)
    }

    #[test]
    fn an_address_other_proxies_can_dial() {
        assert_eq!(
            inbound_addr(" 10.0.0.7:7001\n").unwrap(),
            "10.0.0.7:7001".parse().unwrap()
        );
        assert_eq!(
            inbound_addr("[fd00::7]:7001").unwrap().to_string(),
            "[fd00::7]:7001"
        );
        for text in [
            "pricing",
            "10.0.0.7",
            "10.0.0.7:0",
            "0.0.0.0:7001",
            "[::]:7001",
            "",
        ] {
            assert!(bad(text), "{text}");
        }
    }

    /// Found writing the `register_addr` fuzz target's check (docs/security.md, "Fuzzing"): the
    /// unspecified address spelled IPv4-mapped passed `is_unspecified`, and every proxy would
    /// have dialled itself for this copy.
    #[test]
    fn the_unspecified_address_mapped_into_ipv6_is_refused() {
        assert!(bad("[::ffff:0.0.0.0]:7001"));
        assert!(inbound_addr("[::ffff:10.0.0.7]:7001").is_ok());
    }
}
