//! The requests `Ack` and `Token` read, before the plane is locked.

use super::*;
use crate::plane::request::MAX_REASON;

fn ack_request(proxy: &str, reason: &str) -> pb::AckRequest {
    pb::AckRequest {
        service: "pricing".into(),
        version: 7,
        accepted: false,
        reason: reason.into(),
        token: "hopwise-join-x".into(),
        proxy: proxy.into(),
        cert_ca_generation: 2,
        trust_bundle_applied: true,
    }
}

#[test]
fn an_ack_is_taken_as_sent_with_its_reason_bounded_and_printable() {
    let taken = ack(ack_request("pricing-1", "mesh.yaml:3:5: bad")).unwrap();
    assert_eq!(
        taken,
        Ack {
            token: "hopwise-join-x".into(),
            service: "pricing".into(),
            proxy: "pricing-1".into(),
            version: 7,
            accepted: false,
            reason: "mesh.yaml:3:5: bad".into(),
            cert_ca_generation: 2,
            trust_bundle_applied: true,
        }
    );
    // A reason of megabytes, and one that would write log lines of its own.
    let long = ack(ack_request("p", &"r".repeat(4 << 20))).unwrap();
    assert_eq!(long.reason.len(), MAX_REASON);
    let forged = ack(ack_request("p", "no\nINFO all good")).unwrap();
    assert_eq!(forged.reason, "no\\nINFO all good");
}

#[test]
fn an_ack_from_a_name_that_cannot_be_kept_is_refused() {
    for bad in ["p\r\nx", &"p".repeat(300)] {
        assert!(matches!(
            ack(ack_request(bad, "")),
            Err(ApiError::BadProxyName(_))
        ));
    }
}

#[test]
fn a_token_call_names_a_service_and_its_answer_says_where_the_token_is() {
    let ask = token(pb::TokenRequest {
        service: "pricing".into(),
        revoke: false,
    })
    .unwrap();
    let answer = token_response(
        ask.clone(),
        "hopwise-join-new".into(),
        Path::new("/s/tokens/pricing"),
    );
    assert_eq!(answer.service, "pricing");
    assert_eq!(answer.token, "hopwise-join-new");
    assert_eq!(answer.token_file, "/s/tokens/pricing");
    assert!(answer.message.contains("replaced"), "{}", answer.message);
    let revoked = token_response(
        TokenAsk {
            revoke: true,
            ..ask
        },
        "hopwise-join-new".into(),
        Path::new("/s/tokens/pricing"),
    );
    assert_eq!(revoked.token, "", "never sent back");
    assert!(revoked.message.contains("revoked"), "{}", revoked.message);
    // A name no mesh file holds, and a path out of the token directory.
    for bad in ["", "../../etc/x", "a/b", "A"] {
        let asked = token(pb::TokenRequest {
            service: bad.into(),
            revoke: true,
        });
        assert!(matches!(asked, Err(ApiError::UnknownService(_))), "{bad:?}");
    }
}
