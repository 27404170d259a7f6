//! Labels on a service's copies (`copies[i].labels` in the file, `hopwise proxy --label` for a
//! copy that registers with the control plane) and the subsets of a route's backends that select
//! copies by them (docs/routes.md, "Label subsets").
//!
//! Keys and values are checked as Kubernetes checks a pod's labels, so a copy's labels can be its
//! pod's: a key is an optional DNS-subdomain prefix and `/`, then a name of at most 63
//! characters, alphanumeric at both ends with `-`, `_`, `.` between; a value is empty or such a
//! name. Pure.

use std::collections::BTreeMap;

/// A copy's labels, or a subset's: key → value, in key order (so two equal sets compare and hash
/// alike whatever order they were written in).
pub type Labels = BTreeMap<String, String>;

/// The most labels one copy may carry (a bound for the control plane's registry; Kubernetes has
/// none, but its pods rarely carry more than a handful).
pub const MAX_LABELS: usize = 32;

/// A key's longest prefix (a DNS subdomain).
const MAX_PREFIX: usize = 253;
/// A key's name's, and a value's, longest.
const MAX_NAME: usize = 63;

/// Whether a copy carrying `labels` is in `subset`: it carries each of the subset's labels with
/// the same value (an empty subset takes every copy).
pub fn carries(labels: &Labels, subset: &Labels) -> bool {
    subset.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// `key` as a Kubernetes label key, or why not.
pub fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !(prefix.len() <= MAX_PREFIX && prefix.split('.').all(crate::kubernetes::is_label))
    {
        return Err(format!(
            "`{key}` is not a label key: its prefix `{prefix}` must be a DNS subdomain (lowercase letters, digits, `-` and `.`, at most {MAX_PREFIX} characters)"
        ));
    }
    if !label_name(name) {
        return Err(format!(
            "`{key}` is not a label key: {}",
            name_rule(if prefix.is_some() {
                "the name after `/`"
            } else {
                "it"
            })
        ));
    }
    Ok(())
}

/// `value` as a Kubernetes label value (empty, or a name), or why not.
pub fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || label_name(value) {
        Ok(())
    } else {
        Err(format!(
            "`{value}` is not a label value: {}",
            name_rule("it")
        ))
    }
}

/// One label, `KEY=VALUE` (the command line's form), checked.
pub fn parse_pair(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not a label: write KEY=VALUE, e.g. version=v2"))?;
    check_key(key)?;
    check_value(value)?;
    Ok((key.to_owned(), value.to_owned()))
}

fn name_rule(what: &str) -> String {
    format!(
        "{what} must be at most {MAX_NAME} letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit"
    )
}

fn label_name(s: &str) -> bool {
    let end = |c: char| c.is_ascii_alphanumeric();
    !s.is_empty()
        && s.len() <= MAX_NAME
        && s.chars().all(|c| end(c) || matches!(c, '-' | '_' | '.'))
        && s.starts_with(end)
        && s.ends_with(end)
}

#[cfg(test)]
mod read_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_copy_is_in_a_subset_when_it_carries_every_label_of_it() {
        let copy = labels(&[("version", "v2"), ("zone", "a")]);
        assert!(carries(&copy, &labels(&[])));
        assert!(carries(&copy, &labels(&[("version", "v2")])));
        assert!(carries(&copy, &labels(&[("version", "v2"), ("zone", "a")])));
        assert!(!carries(&copy, &labels(&[("version", "v1")])));
        assert!(!carries(
            &copy,
            &labels(&[("version", "v2"), ("tier", "x")])
        ));
        assert!(!carries(&labels(&[]), &labels(&[("version", "v2")])));
    }

    #[test]
    fn keys_and_values_are_checked_as_kubernetes_checks_them() {
        for good in [
            "version",
            "app.kubernetes.io/version",
            "a",
            "A_b.c-D",
            "example.com/x",
        ] {
            assert_eq!(check_key(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "-v",
            "v-",
            "a b",
            "Example.com/x",
            "/x",
            "a/",
            "a/b/c",
            &"x".repeat(64),
        ] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
        for good in ["", "v2", "1.0.0", "Canary_x"] {
            assert_eq!(check_value(good), Ok(()), "{good}");
        }
        for bad in ["v 2", "-v", "v/2", "é", &"x".repeat(64)] {
            assert!(check_value(bad).is_err(), "{bad:?}");
        }
        let message = check_key("a b").unwrap_err();
        assert!(message.contains("`a b` is not a label key"), "{message}");
    }

    #[test]
    fn a_command_line_pair_is_key_equals_value() {
        assert_eq!(
            parse_pair("version=v2"),
            Ok(("version".into(), "v2".into()))
        );
        assert_eq!(parse_pair("tier="), Ok(("tier".into(), String::new())));
        assert!(parse_pair("version").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_pair("ver sion=v2").is_err());
        assert!(parse_pair("version=v 2").is_err());
    }
}
