//! `hopwise_api::spiffe::parse_id`: an accepted ID is exactly `spiffe://` + the trust domain it
//! returns + its path, printed back from its parts (no canonical form other than itself: what
//! is not already in it is refused), and nothing in it a URI would read as more than a path.
#![no_main]

use hopwise_api::spiffe::parse_id;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let id = String::from_utf8_lossy(data);
    let Ok(domain) = parse_id(&id) else {
        return;
    };
    let rest = &id["spiffe://".len()..];
    assert!(rest.starts_with(domain), "{id:?}: trust domain {domain:?}");
    let path = &rest[domain.len()..];
    let segments: Vec<&str> = if path.is_empty() {
        Vec::new()
    } else {
        path[1..].split('/').collect()
    };
    let mut printed = format!("spiffe://{domain}");
    for s in &segments {
        printed.push('/');
        printed.push_str(s);
    }
    assert_eq!(printed, *id);
    assert!(id.len() <= 2048);
    assert!(!domain.is_empty() && domain.len() <= 255);
    assert!(!domain.contains(|c: char| c.is_ascii_uppercase()));
    assert!(id.bytes().all(|c| c.is_ascii_graphic()), "{id:?}");
    assert!(!rest.contains(['?', '#', ':', '@', '%', '\\']), "{id:?}");
    for s in segments {
        assert!(!s.is_empty() && s != "." && s != "..", "{id:?}");
    }
    // The same ID in another case of scheme or trust domain names nobody.
    assert!(parse_id(&id.to_ascii_uppercase()).is_err());
});
