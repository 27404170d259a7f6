use super::*;

fn http(port: u16, path: &str) -> AppProbe {
    AppProbe {
        action: Action::Http {
            port,
            path: path.to_owned(),
            https: false,
            headers: vec![Header {
                name: "X-Probe".to_owned(),
                value: "kubelet".to_owned(),
            }],
        },
        timeout_seconds: 1,
    }
}

#[test]
fn probes_round_trip_through_their_json() {
    let mut probes = AppProbes::default();
    let ready = path("app", Kind::Readiness);
    assert_eq!(ready, "/app-health/app/readyz");
    probes
        .insert(ready.clone(), http(8080, "/healthz?full=1"))
        .unwrap();
    let tcp = AppProbe {
        action: Action::Tcp { port: 5432 },
        timeout_seconds: 3,
    };
    probes
        .insert(path("db", Kind::Liveness), tcp.clone())
        .unwrap();
    let grpc = AppProbe {
        action: Action::Grpc {
            port: 9090,
            service: "shop.Cart".to_owned(),
        },
        timeout_seconds: 2,
    };
    probes
        .insert(path("cart", Kind::Startup), grpc.clone())
        .unwrap();
    let back = AppProbes::parse(&probes.to_json()).unwrap();
    assert_eq!(back, probes);
    assert_eq!(back.get("/app-health/db/livez"), Some(&tcp));
    assert_eq!(back.get("/app-health/cart/startupz"), Some(&grpc));
    assert_eq!(back.get("/app-health/app/livez"), None);
    assert_eq!(back.get("/ready"), None);
}

#[test]
fn the_json_is_checked_as_insert_checks() {
    let refused = |text: &str, says: &str| {
        let e = AppProbes::parse(text).unwrap_err().to_string();
        assert!(e.contains(says), "{text}: {e}");
        assert!(e.starts_with(ENV), "{e}");
    };
    let one = |path: &str, probe: &str| format!(r#"{{"{path}": {probe}}}"#);
    let http = |port: u32, target: &str| {
        format!(
            r#"{{"action": {{"http": {{"port": {port}, "path": "{target}"}}}}, "timeout_seconds": 1}}"#
        )
    };
    refused("[]", "not the probes' JSON");
    refused("{", "not the probes' JSON");
    refused(&one("/ready", &http(80, "/")), "not /app-health/");
    refused(
        &one("/app-health/app/other", &http(80, "/")),
        "not /app-health/",
    );
    refused(
        &one("/app-health/App_1/readyz", &http(80, "/")),
        "not a container's name",
    );
    refused(&one("/app-health/app/readyz", &http(0, "/")), "port 0");
    refused(
        &one("/app-health/app/readyz", &http(70000, "/")),
        "not the probes' JSON",
    );
    refused(
        &one("/app-health/app/readyz", &http(80, "healthz")),
        "not a path to request",
    );
    refused(
        &one("/app-health/app/readyz", &http(80, "/a b")),
        "not a path to request",
    );
    refused(
        &one("/app-health/app/readyz", &http(80, "/a<b")),
        "not a path to request",
    );
    refused(
        &one(
            "/app-health/app/readyz",
            r#"{"action": {"http": {"port": 80, "path": "/", "headers": [{"name": "a", "value": "x\r\nInjected: 1"}]}}, "timeout_seconds": 1}"#,
        ),
        "carriage return",
    );
    refused(
        &one(
            "/app-health/app/readyz",
            r#"{"action": {"tcp": {"port": 80}}, "timeout_seconds": 0}"#,
        ),
        "timeout_seconds 0",
    );
    refused(
        &one(
            "/app-health/app/readyz",
            r#"{"action": {"exec": {"command": ["sh"]}}, "timeout_seconds": 1}"#,
        ),
        "not the probes' JSON",
    );
    let many: Vec<String> = (0..=MAX_PROBES)
        .map(|i| format!(r#""/app-health/c{i}/readyz": {}"#, http(80, "/")))
        .collect();
    refused(&format!("{{{}}}", many.join(",")), "more than the 64");
}
