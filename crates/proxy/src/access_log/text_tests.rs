use super::*;

fn json(s: &str) -> String {
    let mut out = Vec::new();
    json_str(&mut out, s.as_bytes());
    String::from_utf8(out).unwrap()
}

#[test]
fn strings_are_escaped_as_json_requires() {
    assert_eq!(json("plain"), "\"plain\"");
    assert_eq!(json("a\"b\\c"), r#""a\"b\\c""#);
    assert_eq!(json("\n\u{1}\u{1f}"), r#""\u000a\u0001\u001f""#);
    assert_eq!(json("…é"), "\"…é\"");
    assert_eq!(json(""), "\"\"");
}

/// The old byte-at-a-time rule, which the eight-byte test must agree with.
fn needs(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

#[test]
fn a_word_needs_escaping_exactly_when_one_of_its_bytes_does() {
    // Every byte at every place, among neighbours low, plain and high (high bytes are
    // where the borrow trick could go wrong).
    for background in [0u8, b'a', 0x7f, 0x80, 0xff, b'"' + 1, 0x20] {
        for at in 0..8 {
            for b in 0..=255u8 {
                let mut word = [background; 8];
                word[at] = b;
                let want = word.iter().any(|&b| needs(b));
                assert_eq!(needs_escape(u64::from_le_bytes(word)), want, "{word:?}");
            }
        }
    }
    for _ in 0..100_000 {
        let word = fastrand::u64(..).to_le_bytes();
        let want = word.iter().any(|&b| needs(b));
        assert_eq!(needs_escape(u64::from_le_bytes(word)), want, "{word:?}");
    }
}

#[test]
fn long_text_is_escaped_wherever_the_escapes_fall() {
    for len in 0..40 {
        for at in 0..len {
            for special in [b'"', b'\\', b'\n', 0x01] {
                let mut s = vec![b'x'; len];
                s[at] = special;
                let s = String::from_utf8(s).unwrap();
                let want: String = s
                    .chars()
                    .map(|c| match c {
                        '"' => "\\\"".to_owned(),
                        '\\' => "\\\\".to_owned(),
                        c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32),
                        c => c.to_string(),
                    })
                    .collect();
                assert_eq!(json(&s), format!("\"{want}\""));
            }
        }
    }
}

#[test]
fn addresses_are_written_as_display_does() {
    for a in [
        "127.0.0.1:7001",
        "0.0.0.0:0",
        "255.255.255.255:65535",
        "[::1]:80",
    ] {
        let a: std::net::SocketAddr = a.parse().unwrap();
        let mut out = Vec::new();
        addr(&mut out, a);
        assert_eq!(String::from_utf8(out).unwrap(), a.to_string());
    }
}

#[test]
fn numbers_are_decimal_and_padded() {
    let mut out = Vec::new();
    uint(&mut out, 0);
    out.push(b' ');
    uint(&mut out, u64::MAX);
    out.push(b' ');
    padded(&mut out, 7, 6);
    out.push(b' ');
    padded(&mut out, 2026, 2);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "0 18446744073709551615 000007 2026"
    );
    for n in (0..100_000).chain([u64::MAX - 1, 1 << 40, 999_999_999]) {
        let mut out = Vec::new();
        uint(&mut out, n);
        assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
        let mut out = Vec::new();
        padded(&mut out, n, 6);
        assert_eq!(String::from_utf8(out).unwrap(), format!("{n:06}"));
    }
}

#[test]
fn a_trace_id_is_lowercase_hex() {
    let id: [u8; 16] = std::array::from_fn(|i| (i as u8) * 17);
    let mut out = Vec::new();
    hex(&mut out, &id);
    let want: String = id.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(String::from_utf8(out).unwrap(), want);
}

#[test]
fn names_hold_short_and_long_text() {
    let long = "a".repeat(INLINE + 1);
    assert_eq!(Name::new("quote").as_str(), "quote");
    assert_eq!(Name::new(&long).as_str(), long);
    assert_eq!(Name::new("é…").as_str(), "é…");
    assert_eq!(Name::default().as_str(), "");
}
