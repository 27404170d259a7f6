//! What a local HTTP server that a browser can reach (the dashboard, the sample apps' knob
//! ports) accepts, so that a web page the user has open elsewhere cannot drive it:
//!
//! - every request names the server by one of its own loopback names and its port in `Host`
//!   (and in an absolute-form request target): `127.0.0.1:PORT`, `localhost:PORT`,
//!   `[::1]:PORT` (or, for a server bound off loopback, its own address as written:
//!   [`check_at`]). A page on `evil.example` that re-binds its name to 127.0.0.1 (DNS
//!   rebinding) still sends `Host: evil.example:PORT`, and is refused;
//! - a request that can change state (every method but `GET` and `HEAD`) also says
//!   `Content-Type: application/json` (a cross-site form cannot, and a cross-site `fetch` that
//!   does needs a CORS preflight these servers never grant) and carries no `Origin`, or the
//!   server's own (`http://` and one of the names above): cross-site request forgery.
//!
//! Pure: the caller hands over the method and the header values; no I/O, no `http` types. A
//! header sent twice, or not text, counts as wrong, never as absent.

/// One request header as received: absent, once, or unusable (repeated, not visible ASCII).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header<'a> {
    Absent,
    One(&'a str),
    Unusable,
}

impl<'a> Header<'a> {
    /// The header from every value the request carries under its name.
    pub fn of(values: impl IntoIterator<Item = &'a [u8]>) -> Header<'a> {
        let mut values = values.into_iter();
        let Some(first) = values.next() else {
            return Header::Absent;
        };
        if values.next().is_some() {
            return Header::Unusable;
        }
        match std::str::from_utf8(first) {
            Ok(text)
                if text
                    .bytes()
                    .all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic()) =>
            {
                Header::One(text.trim())
            }
            _ => Header::Unusable,
        }
    }
}

/// What the guard reads of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asked<'a> {
    /// The method as sent (`POST`).
    pub method: &'a str,
    /// The authority of an absolute-form request target (`GET http://host:port/ HTTP/1.1`).
    pub authority: Option<&'a str>,
    pub host: Header<'a>,
    pub origin: Header<'a>,
    pub content_type: Header<'a>,
}

/// Why a request was refused; [`Refusal::status`] is the answer's status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("this server answers only to Host 127.0.0.1:{0}, localhost:{0} or [::1]:{0}")]
    Host(u16),
    #[error(
        "a change from another origin is refused; this server's origin is http://127.0.0.1:{0}"
    )]
    Origin(u16),
    #[error("a change must be sent as content-type: application/json")]
    ContentType,
}

impl Refusal {
    /// 403 for a foreign host or origin, 415 for a body that is not JSON.
    pub fn status(self) -> u16 {
        match self {
            Refusal::Host(_) | Refusal::Origin(_) => 403,
            Refusal::ContentType => 415,
        }
    }
}

/// Whether a request with `method` can change state (everything but `GET` and `HEAD`).
pub fn changes_state(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD")
}

/// Accepts `asked` or says why not, for a server listening on loopback port `port`.
pub fn check(port: u16, asked: &Asked<'_>) -> Result<(), Refusal> {
    check_names(port, |a| own_authority(port, a), asked)
}

/// [`check`] for a server listening at `local`, which may be off loopback (a proxy's admin
/// port with `--allow-remote-admin`, scraped at a pod's address): on loopback, its loopback
/// names; elsewhere, only `local` itself written as an address (`10.1.2.3:9901`), which no
/// page can re-bind a name of its own to.
pub fn check_at(local: std::net::SocketAddr, asked: &Asked<'_>) -> Result<(), Refusal> {
    let port = local.port();
    if local.ip().is_loopback() {
        return check(port, asked);
    }
    check_names(port, |a| literal_authority(local, a), asked)
}

fn check_names(port: u16, own: impl Fn(&str) -> bool, asked: &Asked<'_>) -> Result<(), Refusal> {
    let host_ok = match asked.host {
        Header::One(h) => own(h),
        Header::Absent | Header::Unusable => false,
    };
    if !host_ok || asked.authority.is_some_and(|a| !own(a)) {
        return Err(Refusal::Host(port));
    }
    if !changes_state(asked.method) {
        return Ok(());
    }
    match asked.origin {
        Header::Absent => {}
        Header::One(o) if own_origin(port, o) => {}
        Header::One(_) | Header::Unusable => return Err(Refusal::Origin(port)),
    }
    match asked.content_type {
        Header::One(t) if is_json(t) => Ok(()),
        _ => Err(Refusal::ContentType),
    }
}

/// [`check`] over a request's headers as `header(name)` gives them (`name` in lower case:
/// `host`, `origin`, `content-type`), so each server's call is one expression.
pub fn check_request<'a>(
    port: u16,
    method: &'a str,
    authority: Option<&'a str>,
    header: impl Fn(&'static str) -> Header<'a>,
) -> Result<(), Refusal> {
    let asked = Asked {
        method,
        authority,
        host: header("host"),
        origin: header("origin"),
        content_type: header("content-type"),
    };
    check(port, &asked)
}

/// `authority` is one of this server's loopback names with its port (or no port, on port 80).
fn own_authority(port: u16, authority: &str) -> bool {
    let (name, given) = match authority.rsplit_once(':') {
        // `[::1]` alone: that colon is inside the brackets.
        Some((name, p)) if !p.ends_with(']') => {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return false;
            }
            (name, p.parse::<u16>().ok())
        }
        _ => (authority, Some(80)),
    };
    given == Some(port)
        && (name.eq_ignore_ascii_case("localhost") || name == "127.0.0.1" || name == "[::1]")
}

/// `authority` is `local` written as an address, its port given or (on port 80) left out.
fn literal_authority(local: std::net::SocketAddr, authority: &str) -> bool {
    if let Ok(a) = authority.parse::<std::net::SocketAddr>() {
        return a == local;
    }
    let bare = authority.trim_start_matches('[').trim_end_matches(']');
    local.port() == 80 && bare.parse::<std::net::IpAddr>() == Ok(local.ip())
}

/// `origin` is `http://` and one of this server's own authorities (the servers speak plain HTTP).
fn own_origin(port: u16, origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    scheme.eq_ignore_ascii_case("http") && own_authority(port, rest)
}

/// The media type is `application/json`, whatever its parameters (`; charset=utf-8`).
fn is_json(content_type: &str) -> bool {
    let media = content_type.split(';').next().unwrap_or("").trim();
    media.eq_ignore_ascii_case("application/json")
}

#[cfg(test)]
#[path = "browser_guard_tests.rs"]
mod tests;
