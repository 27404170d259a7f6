//! Join tokens: one random secret per service, which a proxy presents to get a certificate,
//! register a copy and subscribe to its configuration. A token names exactly one service; the
//! service is looked up from the token, never taken from the request. The admin token, one per
//! control plane (shared by replicas), authorises `Apply`, `RotateCa` and `Status`.
//!
//! Tokens are 32 random bytes from the operating system (`ring::rand::SystemRandom`), written
//! as `hopwise-join-<64 hex digits>` (`hopwise-admin-…`), and compared in constant time.

use std::collections::{BTreeMap, HashMap};

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

/// The services' tokens by their SHA-256 digest, so a proxy's call finds its service in one
/// lookup instead of comparing every token: a lookup's time tells of the digest, never of the
/// token. An answer is always checked against the token stored now (in constant time), and a
/// token the index does not know is looked for by [`service_of`], so an index built before the
/// tokens changed is slower, never wrong.
#[derive(Default)]
pub struct TokenIndex(HashMap<[u8; 32], String>);

impl std::fmt::Debug for TokenIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenIndex({} tokens)", self.0.len())
    }
}

/// A token's SHA-256 digest: what indexes and caches keep instead of the token.
pub(crate) fn digest(token: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

impl TokenIndex {
    pub fn of<T: AsRef<str>>(tokens: &BTreeMap<String, T>) -> TokenIndex {
        TokenIndex(
            tokens
                .iter()
                .map(|(service, t)| (digest(t.as_ref()), service.clone()))
                .collect(),
        )
    }

    /// [`service_of`], through the index.
    pub fn service_of<'a, T: AsRef<str>>(
        &self,
        tokens: &'a BTreeMap<String, T>,
        token: &str,
    ) -> Option<&'a str> {
        if token.is_empty() {
            return None;
        }
        let indexed = self
            .0
            .get(&digest(token))
            .and_then(|service| tokens.get_key_value(service))
            .filter(|(_, t)| same(t.as_ref().as_bytes(), token.as_bytes()));
        match indexed {
            Some((service, _)) => Some(service.as_str()),
            None => service_of(tokens, token),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_finds_what_the_scan_finds_even_when_built_before_a_change() {
        let mut tokens: BTreeMap<String, String> = BTreeMap::new();
        tokens.insert("a".into(), new_token().unwrap());
        tokens.insert("b".into(), new_token().unwrap());
        let index = TokenIndex::of(&tokens);
        for t in [
            tokens["a"].clone(),
            tokens["b"].clone(),
            "nope".into(),
            String::new(),
        ] {
            assert_eq!(index.service_of(&tokens, &t), service_of(&tokens, &t));
        }
        // `a` rotated, `c` added, the index not rebuilt: the old token is refused, the new
        // ones found.
        let old = tokens["a"].clone();
        tokens.insert("a".into(), new_token().unwrap());
        tokens.insert("c".into(), new_token().unwrap());
        assert_eq!(index.service_of(&tokens, &old), None);
        assert_eq!(index.service_of(&tokens, &tokens["a"].clone()), Some("a"));
        assert_eq!(index.service_of(&tokens, &tokens["c"].clone()), Some("c"));
    }

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
