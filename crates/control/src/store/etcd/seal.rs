//! The secrets' envelope in etcd: every value under `<prefix>/secret/` (the CA with its private
//! key, the join tokens, the admin token) is written sealed with AES-256-GCM under the replicas'
//! store key (`--store-key FILE`, 32 random bytes), never as it is.
//!
//! A sealed value is one line of text, `hopwise-sealed:1:<key id>:<hex of nonce ‖ ciphertext ‖
//! tag>`, with a random 96-bit nonce per write. The key id (16 hex digits of a SHA-256 of the
//! key) names which key sealed it, so a replica with another key says so instead of "corrupt";
//! it reveals nothing of the key. The associated data is the envelope's version, the key id and
//! the full etcd key: a value copied to another key (a token onto another service's, the admin
//! token onto a join token) or relabelled with another key id does not open.
//!
//! [`Keys`] is the current key, which seals, and optionally the previous one, which only opens
//! (a key rotation). Pure but for the random nonce; no file is read here.

use std::fmt;
use std::sync::Arc;

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

const MAGIC: &str = "hopwise-sealed:1:";
const KEY_LEN: usize = 32;

/// Why a key could not be read or a value could not be opened or sealed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error(
        "a store key is 32 bytes, raw or as 64 hex digits (make one with `head -c 32 /dev/urandom`); this holds {0} byte(s)"
    )]
    KeyLength(usize),
    #[error(
        "sealed with store key {found}, and this replica has no --store-key: start it with the key file the other replicas use"
    )]
    NoKey { found: String },
    #[error(
        "sealed with store key {found}, not with this replica's key ({have}): start it with the key file the other replicas use (to move to a new key, give the old one as --store-previous-key)"
    )]
    OtherKey { found: String, have: String },
    #[error("does not open with store key {0}: the value was changed, or copied from another key")]
    Damaged(String),
    #[error("is not a sealed value (`{MAGIC}<key id>:<hex>`)")]
    Malformed,
    #[error("the system's random number generator failed")]
    Random,
}

/// One store key: AES-256-GCM.
#[derive(Clone)]
pub struct StoreKey {
    key: Arc<LessSafeKey>,
    id: String,
}

impl fmt::Debug for StoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreKey({})", self.id)
    }
}

impl StoreKey {
    /// A key file's content: 32 raw bytes, or 64 hex digits (surrounding whitespace ignored).
    pub fn parse(bytes: &[u8]) -> Result<StoreKey, SealError> {
        let trimmed = bytes.trim_ascii();
        let raw = if trimmed.len() == 2 * KEY_LEN {
            hex_decode(trimmed)
        } else {
            None
        };
        let raw = match raw {
            Some(raw) => raw,
            None if bytes.len() == KEY_LEN => bytes.to_vec(),
            None => return Err(SealError::KeyLength(bytes.len())),
        };
        let unbound = UnboundKey::new(&AES_256_GCM, &raw).map_err(|_| SealError::KeyLength(0))?;
        let digest = ring::digest::digest(
            &ring::digest::SHA256,
            &[b"hopwise store key id\0".as_slice(), &raw].concat(),
        );
        Ok(StoreKey {
            key: Arc::new(LessSafeKey::new(unbound)),
            id: hex_encode(&digest.as_ref()[..8]),
        })
    }

    /// The key's name in sealed values (not secret).
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// The key that seals, and the one it replaces (opens only).
#[derive(Debug, Clone)]
pub struct Keys {
    pub current: StoreKey,
    pub previous: Option<StoreKey>,
}

fn aad(id: &str, etcd_key: &str) -> String {
    format!("{MAGIC}{id}:{etcd_key}")
}

/// Whether `stored` is a sealed value (of any key).
pub fn is_sealed(stored: &[u8]) -> bool {
    stored.starts_with(MAGIC.as_bytes())
}

impl Keys {
    /// `plain` sealed under the current key, for the etcd key `etcd_key`.
    pub fn seal(&self, etcd_key: &str, plain: &[u8]) -> Result<Vec<u8>, SealError> {
        let key = &self.current;
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let mut data = plain.to_vec();
        key.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(&key.id, etcd_key).as_bytes()),
                &mut data,
            )
            .map_err(|_| SealError::Random)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Ok(format!("{MAGIC}{}:{}", key.id, hex_encode(&out)).into_bytes())
    }

    /// What `stored` (a sealed value at `etcd_key`) holds, and whether the current key sealed it
    /// (`false`: the previous one; it should be sealed again).
    pub fn open(&self, etcd_key: &str, stored: &[u8]) -> Result<(Vec<u8>, bool), SealError> {
        let (id, mut data) = parse(stored)?;
        let (key, current) = if id == self.current.id {
            (&self.current, true)
        } else {
            match &self.previous {
                Some(p) if p.id == id => (p, false),
                _ => {
                    return Err(SealError::OtherKey {
                        found: id.to_owned(),
                        have: self.current.id.clone(),
                    });
                }
            }
        };
        if data.len() < NONCE_LEN {
            return Err(SealError::Malformed);
        }
        let mut body = data.split_off(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = data.try_into().map_err(|_| SealError::Malformed)?;
        let plain = key
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(id, etcd_key).as_bytes()),
                &mut body,
            )
            .map_err(|_| SealError::Damaged(id.to_owned()))?;
        Ok((plain.to_vec(), current))
    }
}

/// The key id and the bytes of a sealed value.
fn parse(stored: &[u8]) -> Result<(&str, Vec<u8>), SealError> {
    let text = std::str::from_utf8(stored).map_err(|_| SealError::Malformed)?;
    let (id, body) = text
        .strip_prefix(MAGIC)
        .and_then(|rest| rest.split_once(':'))
        .ok_or(SealError::Malformed)?;
    let bytes = hex_decode(body.trim_end().as_bytes()).ok_or(SealError::Malformed)?;
    Ok((id, bytes))
}

/// Opens `stored` without a key: always an error saying which key sealed it.
pub fn no_key(stored: &[u8]) -> SealError {
    match parse(stored) {
        Ok((id, _)) => SealError::NoKey {
            found: id.to_owned(),
        },
        Err(e) => e,
    }
}

fn hex_encode(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn hex_decode(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2)
        .map(|pair| {
            // `from_str_radix` would take a sign: only digits are hex.
            if !pair.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests;
