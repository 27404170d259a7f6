//! `model::browser_guard` (what the dashboard, the sample apps' knob ports and a proxy's admin
//! port accept of a browser) on any request: a method, an absolute-form authority, and `Host`,
//! `Origin` and `Content-Type` as `Header::of` reads the bytes sent, for a server on loopback or
//! off it. Never a panic, and:
//! - `Header::of` gives visible ASCII (or spaces and tabs inside), trimmed, or says unusable;
//! - an accepted request names the server in `Host` — on loopback `127.0.0.1`, `localhost` or
//!   `[::1]` with the server's port (or none on port 80), off it the server's own address — and
//!   so does its authority, if any; `GET` and `HEAD` need nothing else;
//! - an accepted change (any other method) is `application/json` and carries no `Origin` or
//!   `http://` and a name the server would accept in `Host`;
//! - each refusal's status is 403 or 415, as `Refusal::status` says.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use hopwise_model::browser_guard::{Asked, Header, Refusal, changes_state, check_at};
use libfuzzer_sys::fuzz_target;

/// `authority` names the server at `local`, read apart from the guard's own code: its port
/// (decimal after the last `:` outside brackets, or none on port 80), and on loopback one of the
/// loopback names, off it the server's IP written as an address. Lenient where leniency cannot
/// name another host (leading zeros, brackets), so that an acceptance outside it is a hole.
fn names(local: SocketAddr, authority: &str) -> bool {
    let literal = |name: &str| {
        name.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            == Ok(local.ip())
    };
    if !local.ip().is_loopback() && local.port() == 80 && literal(authority) {
        return true;
    }
    let (name, port) = match authority.rsplit_once(':') {
        Some((n, p)) if !p.contains(']') => {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return false;
            }
            match p.trim_start_matches('0').parse::<u16>() {
                Ok(port) => (n, port),
                Err(_) if p.bytes().all(|b| b == b'0') => (n, 0),
                Err(_) => return false,
            }
        }
        _ => (authority, 80),
    };
    port == local.port()
        && if local.ip().is_loopback() {
            name.eq_ignore_ascii_case("localhost") || name == "127.0.0.1" || name == "[::1]"
        } else {
            literal(name)
        }
}

fn header(bytes: Option<&[u8]>) -> Header<'_> {
    let h = Header::of(bytes);
    if let Header::One(t) = h {
        assert_eq!(t, t.trim());
        assert!(
            t.bytes()
                .all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic()),
            "{t:?}"
        );
    }
    h
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let port = u16::from_be_bytes([data[0], data[1]]);
    let flags = data[2];
    let local = match flags & 3 {
        0 => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port),
        1 => SocketAddr::new(IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]), port),
        2 => SocketAddr::new(Ipv4Addr::new(10, 1, 2, 3).into(), port),
        _ => SocketAddr::new(IpAddr::from([0xfd00u16, 0, 0, 0, 0, 0, 0, 7]), port),
    };
    let mut parts = data[3..].split(|b| *b == 0xff);
    let method = std::str::from_utf8(parts.next().unwrap_or_default()).unwrap_or("POST");
    let mut next = |present: bool| parts.next().filter(|_| present);
    let authority = next(flags & 4 != 0).and_then(|a| std::str::from_utf8(a).ok());
    let host = header(next(flags & 8 != 0));
    let origin = header(next(flags & 16 != 0));
    let content_type = header(next(flags & 32 != 0));
    let asked = Asked {
        method,
        authority,
        host,
        origin,
        content_type,
    };
    let verdict = check_at(local, &asked);
    if let Err(refusal) = verdict {
        let want = match refusal {
            Refusal::Host(_) | Refusal::Origin(_) => 403,
            Refusal::ContentType => 415,
        };
        assert_eq!(refusal.status(), want);
        return;
    }
    let Header::One(h) = host else {
        panic!("accepted without a usable Host")
    };
    assert!(names(local, h), "accepted Host {h:?} for {local}");
    assert!(
        authority.is_none_or(|a| names(local, a)),
        "accepted authority {authority:?}"
    );
    if !changes_state(method) {
        return;
    }
    let Header::One(t) = content_type else {
        panic!("a change accepted without a content type")
    };
    let media = t.split(';').next().unwrap_or("").trim();
    assert!(media.eq_ignore_ascii_case("application/json"), "{t:?}");
    match origin {
        Header::Absent => {}
        Header::One(o) => {
            let rest = o
                .get(..7)
                .filter(|s| s.eq_ignore_ascii_case("http://"))
                .map(|_| &o[7..]);
            assert!(
                rest.is_some_and(|r| names(local, r)),
                "accepted Origin {o:?}"
            );
        }
        Header::Unusable => panic!("a change accepted with an unusable Origin"),
    }
});
