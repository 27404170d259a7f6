//! Table tests of `find` on GRPCRoutes: the Gateway API's grpcroute-exact-method-matching and
//! grpcroute-header-matching cases (none: UNIMPLEMENTED), and GRPCRoute's precedence (service
//! characters, then method characters, then headers).

use super::super::*;
use super::request_fields::{HEADER_CASES, header_route};
use super::{headers, route, rule, to};

const ECHO: &str = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";

fn method(service: Option<&str>, method: Option<&str>) -> GrpcMatch {
    GrpcMatch {
        method: Some(GrpcMethodMatch::exact(service, method).unwrap()),
        headers: vec![],
    }
}

fn with_headers(hs: &[(&str, &str)]) -> GrpcMatch {
    GrpcMatch {
        method: None,
        headers: headers(hs).headers,
    }
}

fn call<'r>(routes: &'r [GrpcRoute], rpc: &str, hs: &[(&str, &str)]) -> Option<&'r str> {
    to(routes, None, "POST", &format!("/{ECHO}/{rpc}"), hs)
}

#[test]
fn conformance_exact_method_matching() {
    let routes = [route(vec![
        rule("v1", vec![method(Some(ECHO), Some("Echo"))]),
        rule("v2", vec![method(Some(ECHO), Some("EchoTwo"))]),
    ])];
    assert_eq!(call(&routes, "Echo", &[]), Some("v1"));
    assert_eq!(call(&routes, "EchoTwo", &[]), Some("v2"));
    assert_eq!(call(&routes, "EchoThree", &[]), None);
}

#[test]
fn conformance_header_matching() {
    let routes = [header_route(with_headers)];
    for (hs, want) in HEADER_CASES {
        assert_eq!(call(&routes, "Echo", hs), *want, "{hs:?}");
    }
}

#[test]
fn service_characters_then_method_characters_then_headers() {
    let regex = GrpcMatch {
        method: Some(GrpcMethodMatch::regex(Some(".*Echo"), None).unwrap()),
        headers: vec![],
    };
    let routes = [route(vec![
        rule("headers", vec![with_headers(&[("a", "1"), ("b", "2")])]),
        rule("regex", vec![regex]),
        rule("method", vec![method(None, Some("Echo"))]),
        rule("service", vec![method(Some(ECHO), None)]),
        rule("both", vec![method(Some(ECHO), Some("EchoTwo"))]),
    ])];
    let both = [("a", "1"), ("b", "2")];
    assert_eq!(call(&routes, "EchoTwo", &both), Some("both"));
    assert_eq!(call(&routes, "Echo", &both), Some("service"));
    // A method alone (4 characters) loses to no service, but wins over headers.
    assert_eq!(
        to(&routes, None, "POST", "/other.Svc/Echo", &both),
        Some("method")
    );
    // A regular expression counts no characters: the headers rule, given first, wins the tie
    // on (0, 0) by having more header matches.
    assert_eq!(
        to(&routes, None, "POST", "/x.GrpcEcho/Other", &both),
        Some("headers")
    );
    assert_eq!(
        to(&routes, None, "POST", "/x.GrpcEcho/Other", &[]),
        Some("regex")
    );
    // Not a gRPC path: only matches without a method take it.
    assert_eq!(to(&routes, None, "POST", "/a/b/c", &both), Some("headers"));
}

#[test]
fn method_matches_are_checked_as_the_spec_does() {
    assert!(GrpcMethodMatch::exact(None, None).is_err());
    assert!(GrpcMethodMatch::exact(Some("pkg.v1.Svc"), Some("Do_It2")).is_ok());
    assert!(GrpcMethodMatch::exact(Some("pkg..Svc"), None).is_err());
    assert!(GrpcMethodMatch::exact(None, Some("a/b")).is_err());
    assert!(GrpcMethodMatch::regex(None, None).is_err());
    assert!(GrpcMethodMatch::regex(Some("("), None).is_err());
    // A fully qualified service (leading `.`) matches the path's name.
    let routes = [route(vec![rule(
        "v1",
        vec![method(Some(&format!(".{ECHO}")), None)],
    )])];
    assert_eq!(call(&routes, "Echo", &[]), Some("v1"));
}
