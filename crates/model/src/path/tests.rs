use super::*;
use proptest::prelude::*;

fn norm(p: &str) -> Result<String, PathError> {
    normalize(p).map(Cow::into_owned)
}

#[test]
fn canonical_paths_are_borrowed_untouched() {
    for p in [
        "/",
        "/penalty/pay",
        "/a/b/",
        "/.well-known/x",
        "/a%3Fb",
        "",
        "*",
    ] {
        assert!(
            matches!(normalize(p), Ok(Cow::Borrowed(q)) if q == p),
            "{p}"
        );
        assert!(is_normal(p), "{p}");
    }
}

#[test]
fn spellings_of_one_path_become_it() {
    for p in [
        "/penalty/%70ay",
        "/penalty/%70%61%79",
        "//penalty/pay",
        "/penalty//pay",
        "/x/../penalty/pay",
        "/penalty/./pay",
        "/penalty/pay/.",
        "/../penalty/pay",
        "/%2E%2E/penalty/pay",
        "/x/%2e%2e/penalty/pay",
        "/penalty/x/./../pay",
    ] {
        let want = if p.ends_with("/.") {
            "/penalty/pay/"
        } else {
            "/penalty/pay"
        };
        assert_eq!(norm(p).as_deref(), Ok(want), "{p}");
    }
    assert_eq!(norm("/a/b/.."), Ok("/a/".into()));
    assert_eq!(norm("/a%3fb%7e"), Ok("/a%3Fb~".into()));
    assert_eq!(norm("//"), Ok("/".into()));
}

#[test]
fn what_cannot_be_made_canonical_is_refused() {
    for (p, e) in [
        ("/penalty%2Fpay", PathError::EncodedSeparator),
        ("/penalty%2fpay", PathError::EncodedSeparator),
        ("/penalty%5Cpay", PathError::EncodedSeparator),
        ("/penalty\\pay", PathError::Backslash),
        ("/pay%00", PathError::Nul),
        ("/pay%", PathError::BadPercent),
        ("/pay%4", PathError::BadPercent),
        ("/pay%zz", PathError::BadPercent),
        ("pay", PathError::NotAbsolute),
    ] {
        assert_eq!(norm(p), Err(e), "{p}");
        assert!(!is_normal(p));
    }
}

/// One spelling of `path`: unreserved characters percent-encoded at random (either case),
/// slashes doubled, `./` and `x/../` inserted before segments.
fn spelling(path: String) -> impl Strategy<Value = String> {
    let n = path.len() + 1;
    (
        prop::collection::vec(0u8..8, n),
        prop::collection::vec(0u8..6, n),
    )
        .prop_map(move |(encode, insert)| {
            let mut out = String::new();
            for (i, c) in path.chars().enumerate() {
                if c == '/' {
                    out.push('/');
                    match insert[i] {
                        0 => out.push('/'),
                        1 => out.push_str("./"),
                        2 => out.push_str("zz/../"),
                        3 => out.push_str("%2E/"),
                        _ => {}
                    }
                } else if c.is_ascii() && encode[i] < 3 {
                    let hex = format!("%{:02X}", c as u8);
                    out.push_str(&if encode[i] == 0 {
                        hex.to_ascii_lowercase()
                    } else {
                        hex
                    });
                } else {
                    out.push(c);
                }
            }
            out
        })
}

fn canonical_path() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-zA-Z0-9_~-][a-zA-Z0-9._~-]{0,6}", 0..5)
        .prop_map(|segs| format!("/{}", segs.join("/")))
        .prop_filter("dot segments", |p| is_normal(p))
}

proptest! {
    #[test]
    fn never_panics_and_is_idempotent(p in "\\PC{0,40}") {
        if let Ok(once) = normalize(&p) {
            let twice = normalize(&once);
            prop_assert_eq!(twice.as_deref(), Ok(once.as_ref()));
            prop_assert!(is_normal(&once));
        }
    }

    #[test]
    fn ascii_paths_are_idempotent(p in "/[a-zA-Z0-9%./\\\\~_-]{0,40}") {
        if let Ok(once) = normalize(&p) {
            let twice = normalize(&once);
            prop_assert_eq!(twice.as_deref(), Ok(once.as_ref()));
        }
    }

    /// Every spelling of a path refused by a prefix rule is refused by it too: it normalizes
    /// to the path itself (or is refused outright).
    #[test]
    fn a_refused_path_stays_refused_under_every_spelling(
        (target, spelled) in canonical_path().prop_flat_map(|p| {
            let target = format!("/penalty/pay{p}");
            (Just(target.clone()), spelling(target))
        })
    ) {
        let got = norm(&spelled);
        prop_assert!(
            got.as_deref().is_ok_and(|g| g.starts_with("/penalty/pay")),
            "{} → {:?}", spelled, got
        );
        prop_assert_eq!(got, norm(&target));
    }

    #[test]
    fn spellings_of_the_rule_itself_match_it(spelled in spelling("/penalty/pay".to_owned())) {
        prop_assert_eq!(norm(&spelled), Ok("/penalty/pay".to_owned()));
    }
}
