//! The shared store's records as a replica reads them from etcd: any bytes as a copy's value
//! (`store::etcd::CopyValue::decode`) and a proxy's (`ProxyValue::decode`), and any text as a
//! key (`Layout::parse`, under three prefixes) and as a proxy name's key segment
//! (`store::etcd::proxy::unescape`). Whoever can write etcd reaches these; a replica must refuse
//! what it cannot have written, not panic. Never a panic, and:
//! - a value that decodes is written back (`encode`) to bytes that decode to the same value, and
//!   those bytes are written back to themselves;
//! - a key that parses prints back (`Layout::key`) to exactly itself — one spelling per key, so
//!   a record is never seen under two keys — and is under `<prefix>/secret/` exactly when it
//!   names a secret (the CA, a token, the admin token);
//! - a key made from parts (a service, a proxy name, a lease: the text's lines, the last 8
//!   bytes) parses back to those parts, the proxy name any text at all;
//! - a segment that unescapes escapes back to itself, and any name escapes to one segment (no
//!   `/`, not empty) that unescapes back to the name.
#![no_main]

use hopwise_control::store::etcd::proxy::{escape, unescape};
use hopwise_control::store::etcd::{CopyValue, Key, Layout, ProxyValue};
use libfuzzer_sys::fuzz_target;

const PREFIXES: [&str; 3] = ["/hopwise", "", "/meshes/shop"];

fuzz_target!(|data: &[u8]| {
    values(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for prefix in PREFIXES {
        let layout = Layout::new(prefix);
        key_read(&layout, text);
        key_made(&layout, text, data);
    }
    segment(text);
});

fn values(data: &[u8]) {
    if let Some(v) = round_trip(data, CopyValue::decode, CopyValue::encode) {
        let _ = v.ttl();
    }
    round_trip(data, ProxyValue::decode, ProxyValue::encode);
}

/// A value that decodes is written back to bytes that decode to it and write back to themselves.
fn round_trip<T: PartialEq + std::fmt::Debug>(
    data: &[u8],
    decode: fn(&[u8]) -> Option<T>,
    encode: fn(&T) -> Vec<u8>,
) -> Option<T> {
    let v = decode(data)?;
    let written = encode(&v);
    let again = decode(&written);
    assert_eq!(
        again.as_ref(),
        Some(&v),
        "{}",
        String::from_utf8_lossy(data)
    );
    assert_eq!(again.map(|a| encode(&a)), Some(written));
    Some(v)
}

fn key_read(layout: &Layout, text: &str) {
    let Some(key) = layout.parse(text) else {
        return;
    };
    assert_eq!(layout.key(&key), text, "{key:?} does not print back");
    let secret = matches!(key, Key::Ca | Key::Token(_) | Key::AdminToken);
    assert_eq!(layout.is_secret(text), secret, "{text:?}");
    if let Key::Token(s) | Key::Copy { service: s, .. } | Key::Proxy { service: s, .. } = &key {
        assert!(!s.is_empty() && !s.contains('/'), "{text:?}: service {s:?}");
    }
}

fn key_made(layout: &Layout, text: &str, data: &[u8]) {
    let mut lines = text.splitn(2, '\n');
    let (service, proxy) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    let lease = data
        .rchunks(8)
        .next()
        .map_or(0, |b| b.iter().fold(0u64, |n, &x| n << 8 | u64::from(x)));
    // Services are names the mesh file admits: never empty, never a `/`.
    let mut made = vec![Key::Ca, Key::Mesh, Key::AdminToken];
    if !service.is_empty() && !service.contains('/') {
        made.push(Key::Token(service.to_owned()));
        made.push(Key::Copy {
            service: service.to_owned(),
            lease,
        });
        made.push(Key::Proxy {
            service: service.to_owned(),
            proxy: proxy.to_owned(),
            lease,
        });
    }
    for key in made {
        let written = layout.key(&key);
        assert_eq!(layout.parse(&written).as_ref(), Some(&key), "{written:?}");
    }
}

fn segment(text: &str) {
    if let Some(name) = unescape(text) {
        assert_eq!(escape(&name), text, "{text:?} unescaped to {name:?}");
    }
    let escaped = escape(text);
    assert!(!escaped.is_empty() && !escaped.contains('/'), "{escaped:?}");
    assert_eq!(unescape(&escaped).as_deref(), Some(text));
}
