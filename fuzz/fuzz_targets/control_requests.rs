//! The control plane's reading of `Ack`, `Apply`'s file name and `Token` (`api::wire::ack`,
//! `plane::request::file_name`, `api::wire::token` and `token_response`), pure, before a handler
//! locks the plane; and the admin calls' `authorization` (`token::is_admin`). Input: four texts
//! split at NULs — a proxy's name, an acknowledgement's reason, a file name, a service — whatever
//! a join token's holder (`Ack`) or the admin (`Apply`, `Token`) sends. Never a panic, and:
//! - every label kept (a reason, a file name, a refused name) is the text with each character
//!   `plane::request::escaped` names written as its escape, whole when that fits its bound,
//!   else its longest prefix of whole pieces that leaves room for `…`, then `…`: within the
//!   bound, nothing a terminal or a log line would act on;
//! - an `Ack` is taken exactly when its proxy name is at most 253 bytes and holds no such
//!   character, with every other field as sent and its reason kept so;
//! - a `Token` call is taken exactly when its service is a name the mesh file admits (a
//!   lower-case letter, then lower-case letters, digits, `-`, `_`; 63 bytes at most: an oracle
//!   written out here), one path segment under the token directory; its answer sends the token
//!   only when not revoked and names the service and the file;
//! - the admin token is matched exactly when `authorization` is `Bearer ` and it (spaces
//!   around it aside);
//! - `RotateCa`'s stage (the service's text) is read exactly when it is `add`, `reissue` or
//!   `retire` (`plane::RotateStage::parse`), and its name prints back to it.
#![no_main]

use std::path::{Component, Path};

use hopwise_control::api::wire;
use hopwise_control::pb;
use hopwise_control::plane::request::{self, MAX_FILE_NAME, MAX_PROXY_NAME, MAX_REASON};
use hopwise_control::plane::{ApiError, RotateStage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(4, '\0');
    let mut next = || parts.next().unwrap_or("");
    let (proxy, reason, file, service) = (next(), next(), next(), next());
    ack(proxy, reason);
    label(file, &request::file_name(file), MAX_FILE_NAME);
    token(service, reason.is_empty());
    admin(reason, service);
    stage(service);
});

/// Each character as a label writes it.
fn pieces(text: &str) -> Vec<String> {
    text.chars()
        .map(|c| {
            if request::escaped(c) {
                c.escape_debug().collect()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn label(text: &str, kept: &str, max: usize) {
    let pieces = pieces(text);
    let whole: String = pieces.concat();
    assert!(
        kept.len() <= max,
        "{} bytes kept of at most {max}",
        kept.len()
    );
    assert!(!kept.chars().any(request::escaped), "{kept:?}");
    if whole.len() <= max {
        assert_eq!(kept, whole);
        return;
    }
    let cut = kept.strip_suffix('…').expect("a label cut ends in …");
    let mut prefix = String::new();
    for p in &pieces {
        if prefix.len() + p.len() + '…'.len_utf8() > max {
            break;
        }
        prefix.push_str(p);
    }
    assert_eq!(cut, prefix, "not the longest prefix that fits");
}

fn ack(proxy: &str, reason: &str) {
    let sent = pb::AckRequest {
        service: "pricing".into(),
        version: 7,
        accepted: reason.is_empty(),
        reason: reason.into(),
        token: "hopwise-join-x".into(),
        proxy: proxy.into(),
        cert_ca_generation: 3,
        trust_bundle_applied: true,
    };
    let fits = proxy.len() <= MAX_PROXY_NAME && !proxy.chars().any(request::escaped);
    match wire::ack(sent.clone()) {
        Ok(a) => {
            assert!(fits, "{proxy:?} taken");
            assert_eq!(
                (a.token, a.service, a.proxy, a.version, a.accepted),
                (
                    sent.token,
                    sent.service,
                    sent.proxy,
                    sent.version,
                    sent.accepted
                )
            );
            assert_eq!((a.cert_ca_generation, a.trust_bundle_applied), (3, true));
            label(reason, &a.reason, MAX_REASON);
        }
        Err(ApiError::BadProxyName(n)) => {
            assert!(!fits, "{proxy:?} refused");
            label(proxy, &n, MAX_PROXY_NAME);
        }
        Err(e) => panic!("{e}"),
    }
}

fn token(service: &str, revoke: bool) {
    let mut chars = service.chars();
    let name = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-' | '_'))
        && service.len() <= 63;
    let asked = wire::token(pb::TokenRequest {
        service: service.into(),
        revoke,
    });
    let ask = match asked {
        Ok(ask) => ask,
        Err(ApiError::UnknownService(n)) => {
            assert!(!name, "{service:?} refused");
            label(service, &n, MAX_PROXY_NAME);
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert!(name, "{service:?} taken");
    assert_eq!((ask.service.as_str(), ask.revoke), (service, revoke));
    let dir = Path::new("/var/lib/hopwise/tokens");
    let file = dir.join(&ask.service);
    let parts: Vec<Component> = file
        .strip_prefix(dir)
        .expect("under")
        .components()
        .collect();
    assert_eq!(parts, [Component::Normal(service.as_ref())], "{file:?}");
    let answer = wire::token_response(ask, "hopwise-join-new".into(), &file);
    assert_eq!(answer.token.is_empty(), revoke);
    assert_eq!(answer.service, service);
    assert_eq!(answer.token_file, file.display().to_string());
    assert!(
        answer.message.contains(&format!("`{service}`"))
            && answer.message.contains(&answer.token_file)
    );
}

fn admin(authorization: &str, admin: &str) {
    let expected = !admin.is_empty()
        && authorization
            .strip_prefix("Bearer ")
            .is_some_and(|t| t.trim() == admin);
    assert_eq!(
        hopwise_control::token::is_admin(admin, Some(authorization)),
        expected
    );
    assert!(!hopwise_control::token::is_admin(admin, None));
}

fn stage(text: &str) {
    match RotateStage::parse(text) {
        Ok(stage) => assert_eq!(stage.name(), text),
        Err(ApiError::BadStage(t)) => {
            assert!(!["add", "reissue", "retire"].contains(&text));
            assert_eq!(t, text);
        }
        Err(e) => panic!("{e}"),
    }
}
