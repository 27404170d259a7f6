//! The filters a decision carries and what the proxy does with them, in memory: a redirect's
//! status and `Location`, a rewrite's path and host, header edits on a request and an answer.

use hopwise_model::route::{PathModifier, Request, RoutePath};
use http::HeaderMap;

use super::{NONE, get, outcome, table};
use crate::route::decide::modified_path;
use crate::route::{Decision, UrlRewrite, apply_request, apply_response, decide};

/// mesh/httproute-redirect-path, -port, -scheme, -host-and-status, 303/307/308: the
/// `Location` and status each filter gives.
#[test]
fn conformance_mesh_redirects() {
    let rule = |prefix: &str, redirect: &str| {
        format!(
            "          - matches: [{{ path: {{ value: {prefix} }} }}]
            filters: [{{ type: RequestRedirect, request_redirect: {redirect} }}]\n"
        )
    };
    let prefix = |p: &str| format!("{{ type: ReplacePrefixMatch, replace_prefix_match: {p} }}");
    let full = |p: &str| format!("{{ type: ReplaceFullPath, replace_full_path: {p} }}");
    let rules = [
        rule(
            "/original-prefix",
            &format!("{{ path: {} }}", prefix("/replacement-prefix")),
        ),
        rule(
            "/full",
            &format!("{{ path: {} }}", full("/full-path-replacement")),
        ),
        rule(
            "/path-and-host",
            &format!(
                "{{ hostname: example.org, path: {} }}",
                prefix("/replacement-prefix")
            ),
        ),
        rule(
            "/path-and-status",
            &format!(
                "{{ path: {}, status_code: 301 }}",
                prefix("/replacement-prefix")
            ),
        ),
        rule("/port", "{ port: 8083 }"),
        rule(
            "/port-and-host",
            "{ hostname: example.org, port: 8083, status_code: 301 }",
        ),
        rule("/scheme", "{ scheme: https }"),
        rule("/scheme-and-port", "{ scheme: https, port: 8443 }"),
        rule(
            "/http-on-80",
            "{ scheme: http, port: 80, status_code: 303 }",
        ),
        rule("/307", "{ status_code: 307 }"),
        rule("/308", "{ status_code: 308 }"),
    ];
    let t = table(&format!(
        "    routes:\n      r:\n        rules:\n{}",
        rules.concat()
    ));
    let cases = [
        (
            "/original-prefix/lemon",
            "302 http://b/replacement-prefix/lemon",
        ),
        ("/full/path/original", "302 http://b/full-path-replacement"),
        (
            "/path-and-host",
            "302 http://example.org/replacement-prefix",
        ),
        ("/path-and-status", "301 http://b/replacement-prefix"),
        ("/port", "302 http://b:8083/port"),
        (
            "/port-and-host",
            "301 http://example.org:8083/port-and-host",
        ),
        ("/scheme", "302 https://b/scheme"),
        ("/scheme-and-port", "302 https://b:8443/scheme-and-port"),
        ("/http-on-80", "303 http://b/http-on-80"),
        ("/307?a=1&b", "307 http://b/307?a=1&b"),
        ("/308", "308 http://b/308"),
    ];
    for (path, want) in cases {
        assert_eq!(outcome(&t, &get(path, &NONE), 0), want, "{path}");
    }
    // Without a scheme or port in the filter, the request's own port stays; with a scheme,
    // its well-known port (left out); with no host at all, the path alone.
    let with = |authority| Request {
        authority,
        ..get("/307", &NONE)
    };
    assert_eq!(
        outcome(&t, &with(Some("b:8080")), 0),
        "307 http://b:8080/307"
    );
    assert_eq!(outcome(&t, &with(Some("B.:80")), 0), "307 http://B/307");
    assert_eq!(outcome(&t, &with(None), 0), "307 /307");
    let scheme = Request {
        authority: Some("b:8080"),
        ..get("/scheme", &NONE)
    };
    assert_eq!(outcome(&t, &scheme, 0), "302 https://b/scheme");
}

/// mesh/httproute-rewrite-path: the path each rewrite sends on, the query kept apart.
#[test]
fn conformance_mesh_rewrite_path() {
    let t = table(
        r#"    routes:
      rw:
        rules:
          - matches: [{ path: { value: /prefix/one } }]
            filters: [{ type: URLRewrite, url_rewrite: { path: { type: ReplacePrefixMatch, replace_prefix_match: /one } } }]
            backends: [{ service: b-v1 }]
          - matches: [{ path: { value: /strip-prefix } }]
            filters: [{ type: URLRewrite, url_rewrite: { path: { type: ReplacePrefixMatch, replace_prefix_match: / } } }]
            backends: [{ service: b-v1 }]
          - matches: [{ path: { value: /full/one } }]
            filters: [{ type: URLRewrite, url_rewrite: { hostname: elsewhere.example, path: { type: ReplaceFullPath, replace_full_path: /one } } }]
            backends: [{ service: b-v1 }]"#,
    );
    let rewrite = |path| match decide(&t, &get(path, &NONE), 0) {
        Decision::Forward(f) => f.rewrite,
        other => panic!("{other:?}"),
    };
    let path = |p: &str| {
        Some(UrlRewrite {
            hostname: None,
            path: Some(p.to_owned()),
        })
    };
    assert_eq!(rewrite("/prefix/one/two"), path("/one/two"));
    assert_eq!(rewrite("/strip-prefix/three"), path("/three"));
    assert_eq!(rewrite("/strip-prefix"), path("/"));
    let full = rewrite("/full/one/two").unwrap();
    assert_eq!(full.path.as_deref(), Some("/one"));
    assert_eq!(full.hostname, Some("elsewhere.example"));
}

/// HTTPPathModifier's table for `ReplacePrefixMatch`, row by row (the model drops a
/// prefix's trailing `/`, so `/foo/` is `/foo`; an empty replacement cannot be written, `/`
/// is its spelling).
#[test]
fn replace_prefix_match_follows_the_specs_table() {
    let rows = [
        ("/foo/bar", "/foo", "/xyz", "/xyz/bar"),
        ("/foo/bar", "/foo", "/xyz/", "/xyz/bar"),
        ("/foo", "/foo", "/xyz", "/xyz"),
        ("/foo/", "/foo", "/xyz", "/xyz/"),
        ("/foo/bar", "/foo", "/", "/bar"),
        ("/foo/", "/foo", "/", "/"),
        ("/foo", "/foo", "/", "/"),
        // A rule without matches holds `PathPrefix /`: everything is under it.
        ("/foo", "/", "/xyz", "/xyz/foo"),
        // Not under the prefix (a rule `check` refuses): unchanged.
        ("/foobar", "/foo", "/xyz", "/foobar"),
    ];
    for (path, prefix, replace, want) in rows {
        let m = PathModifier::ReplacePrefixMatch(RoutePath::new(replace).unwrap());
        assert_eq!(
            modified_path(Some(&m), path, Some(prefix)),
            want,
            "{path} {prefix} {replace}"
        );
    }
}

/// RequestHeaderModifier and ResponseHeaderModifier are lent to the proxy; it edits the
/// request (`set` replaces, `add` appends, `remove` drops) but never its own headers.
#[test]
fn header_edits_apply_but_never_to_the_proxys_own_headers() {
    let t = table(
        r#"    routes:
      h:
        rules:
          - filters:
              - type: RequestHeaderModifier
                request_header_modifier:
                  set: [{ name: X-Header-Set, value: set-overwrites-values }, { name: x-hopwise-peer-identity, value: forged }, { name: content-length, value: "9" }]
                  add: [{ name: X-Header-Add, value: header-val-1 }, { name: x-hopwise-timeout-ms, value: "1" }]
                  remove: [X-Header-Remove, x-hopwise-attempt, host]
              - type: ResponseHeaderModifier
                response_header_modifier: { set: [{ name: x-answered, value: "yes" }] }
            backends: [{ service: b-v1 }]"#,
    );
    let Decision::Forward(f) = decide(&t, &get("/", &NONE), 0) else {
        panic!("not forwarded")
    };
    let mut req = http::Request::builder()
        .uri("/x")
        .header("host", "b")
        .header("x-header-set", "set-val")
        .header("x-header-add", "append-val-1")
        .header("x-header-remove", "remove-val")
        .header("x-hopwise-attempt", "1")
        .header("content-length", "0")
        .body(())
        .unwrap();
    apply_request(&mut req, &f).unwrap();
    let h = req.headers();
    let all = |n: &str| {
        h.get_all(n)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(all("x-header-set"), ["set-overwrites-values"]);
    assert_eq!(all("x-header-add"), ["append-val-1", "header-val-1"]);
    assert!(all("x-header-remove").is_empty());
    assert_eq!(all("x-hopwise-attempt"), ["1"]);
    assert!(all("x-hopwise-peer-identity").is_empty() && all("x-hopwise-timeout-ms").is_empty());
    assert_eq!((all("content-length"), all("host")), (vec!["0"], vec!["b"]));
    let mut answer = HeaderMap::new();
    apply_response(&mut answer, f.response_headers.unwrap());
    assert_eq!(answer["x-answered"], "yes");
}

/// A rewrite changes the URI's path (the query kept) and `Host`, and an absolute URI's
/// authority too.
#[test]
fn a_rewrite_sets_path_query_and_host() {
    let t = table(
        r#"    routes:
      rw:
        rules:
          - matches: [{ path: { value: /old } }]
            filters: [{ type: URLRewrite, url_rewrite: { hostname: new.example, path: { type: ReplacePrefixMatch, replace_prefix_match: /new } } }]
            backends: [{ service: b-v1 }]"#,
    );
    let Decision::Forward(f) = decide(&t, &get("/old/x", &NONE), 0) else {
        panic!("not forwarded")
    };
    let mut req = http::Request::builder()
        .uri("http://b/old/x?q=1")
        .header("host", "b")
        .body(())
        .unwrap();
    apply_request(&mut req, &f).unwrap();
    assert_eq!(req.uri().to_string(), "http://new.example/new/x?q=1");
    assert_eq!(req.headers()["host"], "new.example");
}
