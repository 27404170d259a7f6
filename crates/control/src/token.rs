//! Join tokens: one random secret per service, which a proxy presents to get a certificate,
//! register a copy and subscribe to its configuration. A token names exactly one service; the
//! service is looked up from the token, never taken from the request. The admin token, one per
//! control plane (shared by replicas), authorises `Apply`, `RotateCa` and `Status`.
//!
//! Tokens are 32 random bytes from the operating system (`ring::rand::SystemRandom`), written
//! as `hopwise-join-<64 hex digits>` (`hopwise-admin-…`), and compared in constant time.

use std::collections::BTreeMap;

use ring::rand::{SecureRandom, SystemRandom};

/// The operating system gave no randomness.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the operating system's random number generator failed")]
pub struct RandomError;

/// `N` random bytes from the operating system.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], RandomError> {
    let mut out = [0u8; N];
    SystemRandom::new()
        .fill(&mut out)
        .map_err(|_| RandomError)?;
    Ok(out)
}

/// A fresh join token.
pub fn new_token() -> Result<String, RandomError> {
    secret("hopwise-join-")
}

/// A fresh admin token.
pub fn new_admin_token() -> Result<String, RandomError> {
    secret("hopwise-admin-")
}

fn secret(prefix: &str) -> Result<String, RandomError> {
    let bytes: [u8; 32] = random_bytes()?;
    let mut out = String::from(prefix);
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    Ok(out)
}

/// Equal, in time that depends only on the lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a call's `authorization` metadata (`Bearer <token>`) carries the admin token `admin`.
/// Constant time in the token; an empty token never matches.
pub fn is_admin(admin: &str, authorization: Option<&str>) -> bool {
    let presented = authorization
        .and_then(|a| a.strip_prefix("Bearer "))
        .map_or("", str::trim);
    !admin.is_empty() && same(admin.as_bytes(), presented.as_bytes())
}

/// The service a token belongs to, if any. Every stored token is compared, so the time taken
/// does not tell which one (or how much of one) matched.
pub fn service_of<'a, T: AsRef<str>>(
    tokens: &'a BTreeMap<String, T>,
    token: &str,
) -> Option<&'a str> {
    let mut found = None;
    for (service, t) in tokens {
        if same(t.as_ref().as_bytes(), token.as_bytes()) && !token.is_empty() {
            found = Some(service.as_str());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_name_one_service() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), "hopwise-join-".len() + 64);
        let tokens = BTreeMap::from([("a".to_owned(), a.clone()), ("b".to_owned(), b.clone())]);
        assert_eq!(service_of(&tokens, &a), Some("a"));
        assert_eq!(service_of(&tokens, &b), Some("b"));
        assert_eq!(service_of(&tokens, ""), None);
        assert_eq!(service_of(&tokens, &a[..a.len() - 1]), None);
        assert_eq!(service_of(&tokens, "hopwise-join-00"), None);
    }

    #[test]
    fn only_the_admin_token_as_a_bearer_is_admin() {
        let admin = new_admin_token().unwrap();
        assert!(admin.starts_with("hopwise-admin-"));
        assert_eq!(admin.len(), "hopwise-admin-".len() + 64);
        assert!(is_admin(&admin, Some(&format!("Bearer {admin}"))));
        assert!(!is_admin(&admin, None));
        assert!(!is_admin(&admin, Some(&admin)), "without the scheme");
        assert!(!is_admin(&admin, Some("Bearer ")));
        assert!(!is_admin(&admin, Some(&format!("Bearer {}", &admin[1..]))));
        assert!(!is_admin(
            &admin,
            Some(&format!("Bearer {}", new_admin_token().unwrap()))
        ));
        // A join token is not the admin token.
        assert!(!is_admin(
            &admin,
            Some(&format!("Bearer {}", new_token().unwrap()))
        ));
        // No stored token: nobody is admin.
        assert!(!is_admin("", Some("Bearer ")));
    }
}
