//! Request paths in one canonical form, so every path rule (`allow_paths`, route prefixes)
//! decides on what the application will be given, and no spelling of a path gets past a rule
//! that another spelling of it meets.
//!
//! The form (RFC 3986 §6.2.2, plus merged slashes): percent-encoded unreserved characters
//! (`A-Z a-z 0-9 - . _ ~`) are decoded, every other `%xx` is written in upper case, empty
//! segments are merged (`//` → `/`) and `.` and `..` segments are removed (§5.2.4; `..` above
//! the root stays at the root). A path that cannot be made canonical without guessing what the
//! application would make of it is refused: an encoded slash or backslash (`%2F`, `%5C`), an
//! encoded NUL (`%00`), a literal backslash, or a `%` not followed by two hex digits. The query
//! is not part of the path and is never touched. Pure; never panics.

use std::borrow::Cow;

/// Why a path is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path holds an encoded `/` or `\\` (`%2F`, `%5C`)")]
    EncodedSeparator,
    #[error("the path holds an encoded NUL (`%00`)")]
    Nul,
    #[error("the path holds a backslash")]
    Backslash,
    #[error("the path holds a `%` not followed by two hex digits")]
    BadPercent,
    #[error("the path does not start with `/`")]
    NotAbsolute,
}

/// The canonical form of `path` (borrowed when it is canonical already, the common case).
/// `""` and `*` (CONNECT's and `OPTIONS *`'s) are left as they are.
pub fn normalize(path: &str) -> Result<Cow<'_, str>, PathError> {
    if path.is_empty() || path == "*" {
        return Ok(Cow::Borrowed(path));
    }
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    let b = path.as_bytes();
    let suspicious = b.iter().any(|&c| c == b'%' || c == b'\\')
        || b.windows(2)
            .any(|w| w[0] == b'/' && (w[1] == b'/' || w[1] == b'.'));
    if !suspicious {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode_unreserved(b)?;
    let merged = remove_dot_segments(&decoded);
    // Only ASCII was inserted or removed around whole characters: still UTF-8.
    let text = String::from_utf8(merged).map_err(|_| PathError::BadPercent)?;
    Ok(if text == path {
        Cow::Borrowed(path)
    } else {
        Cow::Owned(text)
    })
}

/// Whether `path` is canonical (what a path rule in the mesh file must be).
pub fn is_normal(path: &str) -> bool {
    matches!(normalize(path), Ok(Cow::Borrowed(p)) if p == path)
}

fn unreserved(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decodes `%xx` of unreserved characters, upper-cases the rest, refuses what cannot be kept.
fn decode_unreserved(b: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => return Err(PathError::Backslash),
            b'%' => {
                let (Some(hi), Some(lo)) = (
                    b.get(i + 1).copied().and_then(hex),
                    b.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(PathError::BadPercent);
                };
                let v = hi * 16 + lo;
                match v {
                    0 => return Err(PathError::Nul),
                    b'/' | b'\\' => return Err(PathError::EncodedSeparator),
                    v if unreserved(v) => out.push(v),
                    v => {
                        const HEX: &[u8; 16] = b"0123456789ABCDEF";
                        out.extend_from_slice(&[
                            b'%',
                            HEX[usize::from(v >> 4)],
                            HEX[usize::from(v & 15)],
                        ]);
                    }
                }
                i += 3;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// `/a//b/./c/../d/` → `/a/b/d/`. The input starts with `/`.
fn remove_dot_segments(b: &[u8]) -> Vec<u8> {
    let mut kept: Vec<&[u8]> = Vec::new();
    let mut trailing_slash = false;
    for segment in b.split(|&c| c == b'/').skip(1) {
        trailing_slash = true;
        match segment {
            b"" | b"." => {}
            b".." => {
                kept.pop();
            }
            s => {
                kept.push(s);
                trailing_slash = false;
            }
        }
    }
    let mut out = Vec::with_capacity(b.len());
    for s in &kept {
        out.push(b'/');
        out.extend_from_slice(s);
    }
    if trailing_slash || kept.is_empty() {
        out.push(b'/');
    }
    out
}

#[cfg(test)]
mod tests;
