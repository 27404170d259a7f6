use super::*;

#[test]
fn a_label_escapes_what_a_terminal_acts_on_and_keeps_the_rest() {
    assert_eq!(printable("mesh.yaml", 64), "mesh.yaml");
    assert_eq!(printable("", 64), "");
    assert_eq!(printable("a\nb\u{1b}[2Jc", 64), "a\\nb\\u{1b}[2Jc");
    assert_eq!(printable("x\u{202e}y\u{2028}", 64), "x\\u{202e}y\\u{2028}");
    // Not escaped: backslashes, quotes, any printable text.
    assert_eq!(printable("C:\\\"é\"", 64), "C:\\\"é\"");
}

#[test]
fn a_long_label_is_cut_on_a_boundary_with_a_mark_within_its_bound() {
    let text = "é".repeat(10);
    assert_eq!(printable(&text, 20), text, "20 bytes fit");
    let cut = printable(&text, 19);
    assert_eq!(cut, format!("{}…", "é".repeat(8)));
    assert!(cut.len() <= 19);
    // An escape is never cut in two.
    assert_eq!(printable("ab\u{1b}", 7), "ab…");
    assert_eq!(printable("ab\u{1b}", 8), "ab\\u{1b}");
}

#[test]
fn a_reason_and_a_file_name_are_kept_bounded() {
    let long = "x".repeat(5 * MAX_REASON);
    assert_eq!(reason(&long).len(), MAX_REASON);
    assert!(reason(&long).ends_with('…'));
    assert_eq!(
        reason("mesh.yaml:3:5: bad\nnext"),
        "mesh.yaml:3:5: bad\\nnext"
    );
    assert_eq!(file_name(""), "", "prepare names it");
    let path = format!("/{}", "d/".repeat(3000));
    assert!(file_name(&path).len() <= MAX_FILE_NAME);
}

#[test]
fn a_proxy_name_is_short_and_printable_or_refused() {
    assert_eq!(proxy_name("pricing-1"), Ok("pricing-1"));
    assert_eq!(proxy_name(""), Ok(""));
    assert_eq!(
        proxy_name("a/b%c é"),
        Ok("a/b%c é"),
        "escaped in keys, not here"
    );
    let long = "p".repeat(MAX_PROXY_NAME + 1);
    assert!(
        matches!(proxy_name(&long), Err(ApiError::BadProxyName(n)) if n.len() <= MAX_PROXY_NAME)
    );
    assert_eq!(
        proxy_name("p\nINFO forged"),
        Err(ApiError::BadProxyName("p\\nINFO forged".into()))
    );
}

#[test]
fn a_token_call_names_a_service_the_mesh_file_could_hold() {
    assert_eq!(token_service("pricing"), Ok("pricing"));
    for bad in ["", "../ca", "a/b", "Pricing", "x\u{1b}"] {
        assert!(
            matches!(token_service(bad), Err(ApiError::UnknownService(_))),
            "{bad:?}"
        );
    }
    assert_eq!(
        token_service("x\u{1b}"),
        Err(ApiError::UnknownService("x\\u{1b}".into()))
    );
}

#[test]
fn registered_labels_are_checked_as_the_files_are_and_a_bad_one_is_named() {
    let map = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let good = map(&[("version", "v2"), ("app.kubernetes.io/part-of", "shop")]);
    assert_eq!(labels(&good), Ok(good.clone()));
    assert_eq!(labels(&map(&[])), Ok(map(&[])));
    let refused = |pairs: &[(&str, &str)]| match labels(&map(pairs)) {
        Err(ApiError::BadLabel(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(refused(&[("bad key", "x")]).starts_with("`bad key` is not a label key"));
    assert!(
        refused(&[("version", "v 2")]).starts_with("label `version`: `v 2` is not a label value")
    );
    // Never raw on a log line, never unbounded.
    assert_eq!(
        refused(&[("k\nINFO forged", "x")]),
        "`k\\nINFO forged` is not a label key"
    );
    let long = "k".repeat(100_000);
    assert!(refused(&[(&long, "x")]).len() < 400);
    let many: Vec<(String, String)> = (0..=hopwise_model::labels::MAX_LABELS)
        .map(|i| (format!("k{i}"), "v".to_owned()))
        .collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(refused(&many), "33 labels: at most 32");
}
