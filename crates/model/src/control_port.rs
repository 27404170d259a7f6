//! The control plane's identity name in a mesh, `spiffe://<trust-domain>/control`: the one piece
//! of the control port the mesh itself knows ([`crate::Mesh::control_identity`]). Addresses and
//! the check a client makes of the server are `hopwise-api`'s (`control_port`).
//!
//! A service's identity is `spiffe://<trust-domain>/service/<name>` ([`crate::Mesh::identity`]):
//! `/control` is outside `/service/`, so no proxy's certificate can pass as the control plane.

/// The path of the control plane's identity.
pub const CONTROL_PATH: &str = "/control";

/// `spiffe://<trust_domain>/control`.
pub fn control_identity(trust_domain: &str) -> String {
    format!("spiffe://{trust_domain}{CONTROL_PATH}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_identity_is_the_control_path() {
        assert_eq!(
            control_identity("shop.local"),
            "spiffe://shop.local/control"
        );
    }
}
