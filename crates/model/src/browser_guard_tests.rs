use super::*;

const PORT: u16 = 7980;

fn asked<'a>(
    method: &'a str,
    host: &'a str,
    origin: Option<&'a str>,
    ct: Option<&'a str>,
) -> Asked<'a> {
    let h = |v: Option<&'a str>| v.map_or(Header::Absent, Header::One);
    Asked {
        method,
        authority: None,
        host: Header::One(host),
        origin: h(origin),
        content_type: h(ct),
    }
}

const JSON: Option<&str> = Some("application/json");

#[test]
fn reads_need_only_an_own_host() {
    for host in [
        "127.0.0.1:7980",
        "localhost:7980",
        "LocalHost:7980",
        "[::1]:7980",
    ] {
        assert_eq!(
            check(PORT, &asked("GET", host, None, None)),
            Ok(()),
            "{host}"
        );
        // A read is not a change: a foreign Origin or any body type does not matter.
        let cross = asked("GET", host, Some("http://evil.example"), Some("text/plain"));
        assert_eq!(check(PORT, &cross), Ok(()), "{host}");
    }
    assert_eq!(check(80, &asked("HEAD", "localhost", None, None)), Ok(()));
}

#[test]
fn a_foreign_or_malformed_host_is_refused_for_every_method() {
    for host in [
        "evil.example:7980",
        "evil.example",
        "127.0.0.1:7981",
        "127.0.0.1",
        "localhost:",
        "localhost:+7980",
        "localhost:7980:7980",
        "127.0.0.2:7980",
        "10.0.0.1:7980",
        "[::1]",
        "::1:7980",
        "localhost.:7980",
        "127.0.0.1:7980@evil.example",
        "",
    ] {
        for method in ["GET", "POST"] {
            assert_eq!(
                check(PORT, &asked(method, host, None, JSON)),
                Err(Refusal::Host(PORT)),
                "{method} {host}"
            );
        }
    }
    let mut a = asked("GET", "localhost:7980", None, None);
    for host in [Header::Absent, Header::Unusable] {
        a.host = host;
        assert_eq!(check(PORT, &a), Err(Refusal::Host(PORT)));
    }
}

#[test]
fn an_absolute_target_must_name_this_server_too() {
    let mut a = asked("GET", "localhost:7980", None, None);
    a.authority = Some("evil.example:7980");
    assert_eq!(check(PORT, &a), Err(Refusal::Host(PORT)));
    a.authority = Some("127.0.0.1:7980");
    assert_eq!(check(PORT, &a), Ok(()));
}

#[test]
fn a_change_needs_json_and_an_own_or_no_origin() {
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        assert_eq!(
            check(PORT, &asked(method, "127.0.0.1:7980", None, JSON)),
            Ok(())
        );
        for origin in [
            "http://127.0.0.1:7980",
            "http://localhost:7980",
            "HTTP://[::1]:7980",
        ] {
            let a = asked(method, "127.0.0.1:7980", Some(origin), JSON);
            assert_eq!(check(PORT, &a), Ok(()), "{method} {origin}");
        }
        for origin in [
            "http://evil.example:7980",
            "http://evil.example",
            "https://127.0.0.1:7980",
            "http://127.0.0.1:7981",
            "http://127.0.0.1",
            "null",
            "",
            "127.0.0.1:7980",
        ] {
            let a = asked(method, "127.0.0.1:7980", Some(origin), JSON);
            assert_eq!(
                check(PORT, &a),
                Err(Refusal::Origin(PORT)),
                "{method} {origin}"
            );
        }
    }
    let mut a = asked("POST", "127.0.0.1:7980", None, JSON);
    a.origin = Header::Unusable;
    assert_eq!(check(PORT, &a), Err(Refusal::Origin(PORT)));
}

#[test]
fn only_the_json_media_type_is_a_json_body() {
    for ct in [
        "application/json",
        "Application/JSON",
        "application/json; charset=utf-8",
    ] {
        assert_eq!(
            check(PORT, &asked("POST", "localhost:7980", None, Some(ct))),
            Ok(()),
            "{ct}"
        );
    }
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonp"),
        Some("text/plain; application/json"),
        Some(""),
    ] {
        let a = asked("POST", "localhost:7980", None, ct);
        assert_eq!(check(PORT, &a), Err(Refusal::ContentType), "{ct:?}");
        assert_eq!(Refusal::ContentType.status(), 415);
    }
    assert_eq!(Refusal::Host(1).status(), 403);
    assert_eq!(Refusal::Origin(1).status(), 403);
}

#[test]
fn a_header_sent_twice_or_not_text_is_unusable() {
    assert_eq!(Header::of(Vec::<&[u8]>::new()), Header::Absent);
    assert_eq!(
        Header::of([&b" localhost:1 "[..]]),
        Header::One("localhost:1")
    );
    assert_eq!(Header::of([&b"a"[..], &b"a"[..]]), Header::Unusable);
    assert_eq!(Header::of([&b"local\xffhost"[..]]), Header::Unusable);
    assert_eq!(Header::of([&b"local\nhost"[..]]), Header::Unusable);
}

#[test]
fn off_loopback_only_the_servers_own_address_is_its_name() {
    let local: std::net::SocketAddr = "10.1.2.3:9901".parse().unwrap();
    let at = |host| check_at(local, &asked("GET", host, None, None));
    assert_eq!(at("10.1.2.3:9901"), Ok(()));
    for host in [
        "rebind.example:9901",
        "10.1.2.3:9902",
        "10.1.2.4:9901",
        "10.1.2.3",
        "127.0.0.1:9901",
        "localhost:9901",
    ] {
        assert_eq!(at(host), Err(Refusal::Host(9901)), "{host}");
    }
    let v6: std::net::SocketAddr = "[fd00::7]:80".parse().unwrap();
    assert_eq!(check_at(v6, &asked("GET", "[fd00::7]", None, None)), Ok(()));
    assert_eq!(
        check_at(v6, &asked("GET", "[fd00::7]:80", None, None)),
        Ok(())
    );
}

#[test]
fn on_loopback_check_at_is_check() {
    let local: std::net::SocketAddr = "127.0.0.1:7980".parse().unwrap();
    for host in [
        "127.0.0.1:7980",
        "localhost:7980",
        "[::1]:7980",
        "rebind.example:7980",
    ] {
        let a = asked("GET", host, None, None);
        assert_eq!(check_at(local, &a), check(PORT, &a), "{host}");
    }
}
