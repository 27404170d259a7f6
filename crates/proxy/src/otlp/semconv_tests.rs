use super::*;

fn asked(method: &str, authority: Option<&str>, path: &str, grpc: bool) -> Asked {
    Asked {
        method: method.to_owned(),
        scheme: "http",
        authority: authority.map(str::to_owned),
        path: path.to_owned(),
        grpc,
    }
}

fn get<'a>(attrs: &'a Attributes, key: &str) -> Option<&'a Value> {
    attrs.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
}

fn s(v: &str) -> Option<Value> {
    Some(Value::Str(v.to_owned()))
}

#[test]
fn names_are_method_and_route_or_the_rpc() {
    let a = asked("GET", Some("b"), "/order/7", false);
    assert_eq!(a.span_name(Some("/order")), "GET /order");
    assert_eq!(a.span_name(None), "GET", "never the raw path");
    let g = asked("POST", Some("b"), "/shop.Ledger/Post", true);
    assert_eq!(g.span_name(Some("/shop.Ledger")), "shop.Ledger/Post");
    // Not gRPC, or not a gRPC path: the HTTP name.
    assert_eq!(
        asked("POST", None, "/shop.Ledger/Post", false).span_name(None),
        "POST"
    );
    assert_eq!(asked("POST", None, "/a/b/c", true).span_name(None), "POST");
}

#[test]
fn server_address_and_port_are_apart() {
    let at = |a: &str| asked("GET", Some(a), "/", false).server();
    assert_eq!(at("b"), Some(("b".into(), 80)));
    assert_eq!(at("b:8080"), Some(("b".into(), 8080)));
    assert_eq!(at("[::1]:9"), Some(("::1".into(), 9)));
    assert_eq!(at("[::1]"), Some(("::1".into(), 80)));
    assert_eq!(at("b:x"), None);
    let tls = Asked {
        scheme: "https",
        ..asked("GET", Some("b"), "/", false)
    };
    assert_eq!(tls.server(), Some(("b".into(), 443)));
}

#[test]
fn servers_carry_the_route_clients_the_full_url_and_grpc_its_rpc() {
    let a = asked("GET", Some("b:81"), "/order/7", false);
    let server = a.attributes(Kind::Server, Some("/order"));
    assert_eq!(get(&server, "http.route").cloned(), s("/order"));
    assert_eq!(get(&server, "url.full"), None);
    assert_eq!(get(&server, "server.port"), Some(&Value::Int(81)));
    let client = a.attributes(Kind::Client, Some("/order"));
    assert_eq!(get(&client, "url.full").cloned(), s("http://b:81/order/7"));
    assert_eq!(get(&client, "http.route"), None);
    let g = asked("POST", Some("b"), "/shop.Ledger/Post", true).attributes(Kind::Client, None);
    assert_eq!(get(&g, "rpc.system").cloned(), s("grpc"));
    assert_eq!(get(&g, "rpc.service").cloned(), s("shop.Ledger"));
    assert_eq!(get(&g, "rpc.method").cloned(), s("Post"));
}

#[test]
fn a_4xx_fails_the_client_not_the_server() {
    let err = |kind, status, grpc, local| {
        let mut out = Vec::new();
        let e = answer(&mut out, kind, status, grpc, local);
        (e, get(&out, "error.type").cloned())
    };
    assert_eq!(err(Kind::Server, 404, None, None), (false, None));
    assert_eq!(err(Kind::Client, 404, None, None), (true, s("404")));
    assert_eq!(err(Kind::Server, 503, None, None), (true, s("503")));
    assert_eq!(
        err(Kind::Server, 504, None, Some("timeout")),
        (true, s("timeout"))
    );
    // A forbidden caller is the caller's error: the server's span is not failed by it.
    assert_eq!(
        err(Kind::Server, 403, None, Some("forbidden")),
        (false, None)
    );
    // gRPC: NOT_FOUND (5) is the caller's; UNAVAILABLE (14) the server's; OK on success too.
    assert_eq!(err(Kind::Server, 200, Some(5), None), (false, None));
    assert_eq!(err(Kind::Client, 200, Some(5), None), (true, s("5")));
    assert_eq!(err(Kind::Server, 200, Some(14), None), (true, s("14")));
    let mut ok = Vec::new();
    assert!(!answer(&mut ok, Kind::Server, 200, Some(0), None));
    assert_eq!(get(&ok, "rpc.grpc.status_code"), Some(&Value::Int(0)));
}
