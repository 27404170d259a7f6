//! What the plane keeps of the text a call sends: a proxy's name (`Subscribe`, `Issue`, `Ack`), an
//! acknowledgement's reason, `Apply`'s file name, the service `Token` names. Each is kept in the
//! plane's records, shared through etcd, written to the log and printed by `hopwise status`, so
//! each is bounded and none carries a control character to a log line or a terminal. Pure;
//! `api/wire.rs` reads requests with it.

use super::ApiError;

/// The longest proxy name: a DNS name's, as a pod's name is at most.
pub const MAX_PROXY_NAME: usize = 253;
/// The most of an acknowledgement's reason kept, in bytes.
pub const MAX_REASON: usize = 1024;
/// The most of a file name kept, in bytes (Linux's `PATH_MAX`).
pub const MAX_FILE_NAME: usize = 4096;
/// What ends a label that was cut.
const CUT: char = '…';

/// A proxy's name as sent, or why it is refused: longer than [`MAX_PROXY_NAME`], or holding a
/// character [`printable`] would escape. Empty is a name (a proxy that gave none).
pub fn proxy_name(name: &str) -> Result<&str, ApiError> {
    if name.len() > MAX_PROXY_NAME || name.chars().any(escaped) {
        return Err(ApiError::BadProxyName(printable(name, MAX_PROXY_NAME)));
    }
    Ok(name)
}

/// An acknowledgement's reason as kept: [`printable`] within [`MAX_REASON`].
pub fn reason(text: &str) -> String {
    printable(text, MAX_REASON)
}

/// `Apply`'s file name as diagnostics name the file: [`printable`] within [`MAX_FILE_NAME`];
/// empty stays empty (`prepare` names it `<applied>`).
pub fn file_name(text: &str) -> String {
    printable(text, MAX_FILE_NAME)
}

/// The service a `Token` call names, when it can be one: a name the mesh file admits
/// (`hopwise_model::read::valid_name`), so it is also one path segment of its token file.
pub fn token_service(name: &str) -> Result<&str, ApiError> {
    if hopwise_model::read::valid_name(name) {
        Ok(name)
    } else {
        Err(ApiError::UnknownService(printable(name, MAX_PROXY_NAME)))
    }
}

/// The labels a copy registers with (`RegisterRequest.labels`), checked as the mesh file's
/// `copies[i].labels` are ([`hopwise_model::labels`]): at most
/// [`hopwise_model::labels::MAX_LABELS`], each key and value a Kubernetes label's. The first bad
/// one refuses them all, named (printable and cut, as any text a call sends).
pub fn labels(
    sent: &std::collections::BTreeMap<String, String>,
) -> Result<hopwise_model::labels::Labels, ApiError> {
    use hopwise_model::labels::{MAX_LABELS, check_key, check_value};
    if sent.len() > MAX_LABELS {
        return Err(ApiError::BadLabel(format!(
            "{} labels: at most {MAX_LABELS}",
            sent.len()
        )));
    }
    for (key, value) in sent {
        let shown = printable(key, MAX_LABEL_SHOWN);
        // A key or value that is not printable as it stands fails the check anyway; its
        // message must not carry it raw.
        let plain = |t: &str| t.len() <= MAX_LABEL_SHOWN && !t.chars().any(escaped);
        if !plain(key) {
            return Err(ApiError::BadLabel(format!("`{shown}` is not a label key")));
        }
        check_key(key).map_err(ApiError::BadLabel)?;
        if !plain(value) {
            let value = printable(value, MAX_LABEL_SHOWN);
            return Err(ApiError::BadLabel(format!(
                "label `{shown}`: `{value}` is not a label value"
            )));
        }
        check_value(value).map_err(|e| ApiError::BadLabel(format!("label `{shown}`: {e}")))?;
    }
    Ok(sent.clone())
}

/// The most of a label's key or value a refusal shows: a key's longest (a prefix of 253, `/`,
/// a name of 63).
const MAX_LABEL_SHOWN: usize = 317;

/// Whether a label writes `c` as its escape: control characters, and the line separators and
/// bidirectional overrides a terminal would act on.
pub fn escaped(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` as a label: each [`escaped`] character written as Rust writes it (`\n`, `\u{1b}`),
/// cut after at most `max` bytes — on an escape's boundary, ending in `…` — when it is longer.
pub fn printable(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    // `out`'s length after the last piece that leaves room for the cut's mark.
    let mut keep = 0;
    for c in text.chars() {
        if escaped(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
        if out.len() > max {
            out.truncate(keep);
            out.push(CUT);
            return out;
        }
        if out.len() + CUT.len_utf8() <= max {
            keep = out.len();
        }
    }
    out
}

#[cfg(test)]
mod tests;
