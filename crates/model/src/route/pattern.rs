//! Regular expressions in routes (`RegularExpression` matches on paths, headers, query
//! parameters, gRPC services and methods): the `regex` crate's dialect (RE2-like), which runs in
//! time linear in the input and has no back-references, compiled once when the route is built,
//! with a bound on the compiled program's size and on the pattern's length so that no route can
//! make matching slow or large. A pattern matches a whole value (it is anchored at both ends),
//! as Envoy's `safe_regex` does.
//!
//! Only compilation, the one question asked of a pattern, and what it can never match
//! (`never.rs`, which `check` asks); which value it is asked about is `find.rs`'s.

mod never;

use std::fmt;

use regex::{Regex, RegexBuilder};

/// A compiled, bounded, anchored regular expression; equal when written the same.
#[derive(Clone)]
pub struct Pattern {
    source: String,
    regex: Regex,
}

impl Pattern {
    /// The longest pattern accepted, in bytes (the Gateway API bounds a path's value to 1024).
    pub const MAX_LEN: usize = 1024;
    /// The largest compiled program accepted, in bytes (`RegexBuilder::size_limit`; the crate's
    /// default is 10 MiB). Enough for `^/users/[0-9]+/orders/[a-z0-9-]{1,64}$` many times over.
    pub const SIZE_LIMIT: usize = 64 * 1024;
    /// The lazy DFA's cache per pattern, in bytes (`RegexBuilder::dfa_size_limit`).
    pub const DFA_SIZE_LIMIT: usize = 256 * 1024;

    pub fn new(source: &str) -> Result<Self, String> {
        if source.is_empty() {
            return Err("a regular expression cannot be empty".into());
        }
        if source.len() > Self::MAX_LEN {
            return Err(format!(
                "a regular expression is at most {} bytes; this one is {}",
                Self::MAX_LEN,
                source.len()
            ));
        }
        let build = |pattern: &str| {
            RegexBuilder::new(pattern)
                .size_limit(Self::SIZE_LIMIT)
                .dfa_size_limit(Self::DFA_SIZE_LIMIT)
                .build()
        };
        // Compiled as written first, so that an error quotes the user's text, not the anchors.
        let regex = build(source)
            .and_then(|_| build(&format!("^(?:{source})$")))
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(limit) => format!(
                    "the regular expression `{source}` compiles larger than {limit} bytes; \
                     write a smaller one (fewer or shorter repetitions)"
                ),
                other => format!("`{source}` is not a regular expression: {other}"),
            })?;
        Ok(Self {
            source: source.to_owned(),
            regex,
        })
    }

    /// Whether the whole of `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        self.regex.is_match(value)
    }

    /// Whether it is proved that no value starting with `prefix` matches (`""`: that no value
    /// at all does). `false` also when it cannot be told (`never.rs`): never a false alarm.
    pub fn never_matches_starting(&self, prefix: &str) -> bool {
        never::proved(self.regex.as_str(), prefix.as_bytes())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Pattern {}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pattern({:?})", self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_matches_the_whole_value() {
        let p = Pattern::new("/v[0-9]+").unwrap();
        assert!(p.matches("/v2") && p.matches("/v10"));
        assert!(!p.matches("/v2/x") && !p.matches("x/v2"));
        // Alternation stays inside the anchors.
        let p = Pattern::new("a|b").unwrap();
        assert!(p.matches("a") && !p.matches("ab"));
    }

    #[test]
    fn large_or_broken_patterns_are_refused() {
        let big = Pattern::new(r"\w{1000}").unwrap_err();
        assert!(big.contains("compiles larger"), "{big}");
        assert!(
            Pattern::new("(")
                .unwrap_err()
                .contains("not a regular expression")
        );
        assert!(Pattern::new("").is_err());
        assert!(Pattern::new(&"a".repeat(Pattern::MAX_LEN + 1)).is_err());
        // Back-references are not in the dialect: matching stays linear.
        assert!(Pattern::new(r"(a)\1").is_err());
    }
}
