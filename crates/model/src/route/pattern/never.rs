//! What a pattern can never match, proved on its automaton: the lazy DFA (`regex-automata`, the
//! engine under the `regex` crate, from the same syntax) of the anchored pattern, walked
//! through a prefix, then every state reachable from there searched for one that matches at the
//! end of a value. A value matches only if some path of bytes leads there, so "none found" is a
//! proof; `matches` only ever reads UTF-8, and the automaton of a UTF-8 pattern accepts nothing
//! else, so no byte string the proxy cannot send is counted either.
//!
//! The DFA cannot read a Unicode word boundary (`\b`, `\B` outside `(?-u:)`) next to a non-ASCII
//! byte, and gives up there ("quit"). There a second automaton decides, of the pattern with
//! those boundaries left out — it matches everything the pattern does and more —: if it too
//! cannot go on with that byte, neither can the pattern; otherwise nothing is claimed. The lazy
//! DFA's cache is bounded and never cleared (a clear would renumber states mid-walk): a pattern
//! whose automaton outgrows it is not judged. What is not proved is never claimed.

use std::collections::HashSet;

use regex_automata::Anchored;
use regex_automata::hybrid::LazyStateID;
use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson::{self, WhichCaptures};
use regex_automata::util::start;
use regex_syntax::hir::{Capture, Hir, HirKind, Look, Repetition};

/// The lazy DFA's cache per automaton, in bytes: the bound the proxy's matching keeps
/// (`Pattern::DFA_SIZE_LIMIT`), room for hundreds of states; a walk stays in milliseconds.
const CACHE: usize = super::Pattern::DFA_SIZE_LIMIT;

/// Whether it is proved that no value starting with `prefix` matches `anchored` (a whole-value
/// pattern, `^(?:…)$`).
pub(super) fn proved(anchored: &str, prefix: &[u8]) -> bool {
    can_match(anchored, prefix) == Some(false)
}

/// Whether some value starting with `prefix` matches; `None` when that cannot be told.
fn can_match(anchored: &str, prefix: &[u8]) -> Option<bool> {
    let hir = regex_syntax::Parser::new().parse(anchored).ok()?;
    let mut exact = Lazy::new(&hir)?;
    let mut wide = match unicode_words(&hir) {
        true => Some(Lazy::new(&widened(&hir))?),
        false => None,
    };
    let wide_start = match wide.as_mut() {
        Some(w) => Some(w.start()?),
        None => None,
    };
    let mut at = (exact.start()?, wide_start);
    for &b in prefix {
        match step(&mut exact, wide.as_mut(), at, b)? {
            Some(next) => at = next,
            None => return Some(false),
        }
    }
    let bytes: Vec<u8> = (exact.dfa.byte_classes().representatives(..))
        .filter_map(|u| u.as_u8())
        .collect();
    let mut seen = HashSet::from([at]);
    let mut todo = vec![at];
    while let Some(s) = todo.pop() {
        if s.0.is_match() || exact.eoi(s.0)?.is_match() {
            return Some(true);
        }
        for &b in &bytes {
            if let Some(next) = step(&mut exact, wide.as_mut(), s, b)?
                && seen.insert(next)
            {
                todo.push(next);
            }
        }
    }
    Some(false)
}

/// A state of the pattern's automaton and, if it has Unicode word boundaries, of the widened one.
type At = (LazyStateID, Option<LazyStateID>);

/// The states after `b`: `Some(None)` when no value goes on with `b`, `None` when it cannot be
/// told.
fn step(exact: &mut Lazy, wide: Option<&mut Lazy>, (e, w): At, b: u8) -> Option<Option<At>> {
    let e = exact.next(e, b)?;
    let w = match (wide, w) {
        (Some(wide), Some(w)) => Some(wide.next(w, b)?),
        _ => None,
    };
    if e.is_dead() || w.is_some_and(|w| w.is_dead()) {
        return Some(None);
    }
    // A quit the widened automaton does not rule out: the walk cannot go on exactly.
    (!e.is_quit()).then_some(Some((e, w)))
}

/// One lazy DFA and its cache.
struct Lazy {
    dfa: DFA,
    cache: Cache,
}

impl Lazy {
    fn new(hir: &Hir) -> Option<Self> {
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .which_captures(WhichCaptures::None)
                    .nfa_size_limit(Some(super::Pattern::SIZE_LIMIT)),
            )
            .build_from_hir(hir)
            .ok()?;
        let dfa = DFA::builder()
            .configure(
                DFA::config()
                    .cache_capacity(CACHE)
                    .minimum_cache_clear_count(Some(0))
                    .unicode_word_boundary(true),
            )
            .build_from_nfa(nfa)
            .ok()?;
        let cache = dfa.create_cache();
        Some(Self { dfa, cache })
    }

    fn start(&mut self) -> Option<LazyStateID> {
        let config = start::Config::new().anchored(Anchored::Yes);
        self.dfa.start_state(&mut self.cache, &config).ok()
    }

    /// The next state; `None` when the cache is full (it is never cleared).
    fn next(&mut self, s: LazyStateID, b: u8) -> Option<LazyStateID> {
        let next = self.dfa.next_state(&mut self.cache, s, b).ok()?;
        (self.cache.clear_count() == 0).then_some(next)
    }

    fn eoi(&mut self, s: LazyStateID) -> Option<LazyStateID> {
        let next = self.dfa.next_eoi_state(&mut self.cache, s).ok()?;
        (self.cache.clear_count() == 0).then_some(next)
    }
}

fn unicode_word(look: Look) -> bool {
    matches!(
        look,
        Look::WordUnicode
            | Look::WordUnicodeNegate
            | Look::WordStartUnicode
            | Look::WordEndUnicode
            | Look::WordStartHalfUnicode
            | Look::WordEndHalfUnicode
    )
}

fn unicode_words(hir: &Hir) -> bool {
    hir.properties().look_set().iter().any(unicode_word)
}

/// `hir` with every Unicode word boundary left out (always true): it matches a superset.
fn widened(hir: &Hir) -> Hir {
    let all = |subs: &[Hir]| subs.iter().map(widened).collect();
    match hir.kind() {
        HirKind::Look(l) if unicode_word(*l) => Hir::empty(),
        HirKind::Concat(subs) => Hir::concat(all(subs)),
        HirKind::Alternation(subs) => Hir::alternation(all(subs)),
        HirKind::Repetition(r) => Hir::repetition(Repetition {
            sub: Box::new(widened(&r.sub)),
            ..r.clone()
        }),
        HirKind::Capture(c) => Hir::capture(Capture {
            sub: Box::new(widened(&c.sub)),
            ..c.clone()
        }),
        _ => hir.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Pattern;

    /// Each pattern, whether it can never match at all, and whether it can never match a value
    /// starting with `/`.
    #[test]
    fn what_is_proved_never_to_match() {
        let cases: &[(&str, bool, bool)] = &[
            // An empty class, end of text before a character, a boundary between two letters.
            (r"[^\s\S]", true, true),
            (r"/api/[^\w\W]", true, true),
            (r"$a", true, true),
            (r"a^", true, true),
            (r"/x$/y", true, true),
            (r"(?-u:a\bb)", true, true),
            (r"a\bb", true, true),
            (r"[a&&b]", true, true),
            // Fine patterns, but a path always starts with `/`.
            (r"api/.*", false, true),
            (r"^api/.*", false, true),
            (r"\w+", false, true),
            (r"[a-z]{3}/x", false, true),
            (r"(?i)API/v[0-9]+", false, true),
            // What can match a path.
            (r"/api/.*", false, false),
            (r".*", false, false),
            (r"(?:a|b)?/x", false, false),
            (r"[^a]pi", false, false),
            (r"\W.*", false, false),
            (r"(?s).+", false, false),
            (r"/\bapi\b.*", false, false),
            (r"/é\b", false, false),
            (r"/\bé\Bx", false, false),
            // Never matches (`é` and `x` are both word characters), but the proof would have to
            // read a Unicode boundary beside a non-ASCII byte: not claimed.
            (r"/é\bx", false, false),
            (r"/\bé", false, false),
        ];
        for &(source, nothing, no_path) in cases {
            let p = Pattern::new(source).unwrap();
            assert_eq!(p.never_matches_starting(""), nothing, "{source}: anything");
            assert_eq!(p.never_matches_starting("/"), no_path, "{source}: `/`…");
        }
    }

    /// A pattern whose automaton outgrows the cache is not judged, though it never matches
    /// (`$z`: a character after the end), and the walk ends at the bound.
    #[test]
    fn a_pattern_too_large_to_walk_is_not_judged() {
        let p = Pattern::new(r"(?:[a-z]|/)*a(?:[a-z]|/){20}$z").unwrap();
        let started = std::time::Instant::now();
        assert!(!p.never_matches_starting("/"));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // Small enough to walk, the same contradiction is proved.
        let p = Pattern::new(r"(?:[a-z]|/)*a(?:[a-z]|/){2}$z").unwrap();
        assert!(p.never_matches_starting(""));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// No false alarm: a pattern said never to match a value starting with a prefix
        /// matches none of a grid of such values.
        #[test]
        fn a_pattern_said_never_to_match_matches_nothing(
            parts in proptest::collection::vec(
                proptest::sample::select(&[
                    "a", "/", "é", "[a/]", "[^a]", r"\b", r"\B", "^", "$", "(?:a|/)", "a*",
                    "/?", ".", r"\w", r"\W", r"(?-u:\b)", "|",
                ][..]),
                1..7,
            ),
        ) {
            let source: String = parts.concat();
            let Ok(p) = Pattern::new(&source) else { return Ok(()) };
            let letters = ["a", "/", "é", " "];
            let mut values = vec![String::new()];
            for _ in 0..4 {
                let longer: Vec<String> = values.iter()
                    .flat_map(|v| letters.iter().map(move |l| format!("{v}{l}")))
                    .collect();
                values.extend(longer);
            }
            for prefix in ["", "/"] {
                if p.never_matches_starting(prefix) {
                    let hit = values.iter().find(|v| v.starts_with(prefix) && p.matches(v));
                    proptest::prop_assert!(hit.is_none(), "{source} matches {hit:?}");
                }
            }
        }
    }
}
