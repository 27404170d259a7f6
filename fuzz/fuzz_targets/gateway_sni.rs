//! The gateway's certificate by the name a TLS client asks for (SNI): the proxy's resolver
//! (`gateway/tls.rs`) hands rustls' server name to `hopwise_model::gateway::Https::
//! certificate_for`, pure, which this feeds. Input: the first line the name asked (`-` alone:
//! none), each other line one certificate's host names, space-separated (those
//! `route::Hostname` refuses are left out, as the mesh file's reader refuses them). Never a
//! panic, and the pick is what an oracle written out here picks: none without a name; else,
//! the name's final dots dropped, the first certificate naming it exactly (any ASCII case);
//! else the first whose `*.suffix` covers it (a label or more before `.suffix`, any case) with
//! the longest suffix; else none. The same pick for the name in upper case and with a final dot.
#![no_main]

use hopwise_model::gateway::{Certificate, Https};
use hopwise_model::route::Hostname;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let asked = lines.next().filter(|l| *l != "-");
    let certificates: Vec<Certificate> = lines
        .map(|l| Certificate {
            hostnames: l.split(' ').filter_map(|h| Hostname::new(h).ok()).collect(),
            cert: String::new(),
            key: String::new(),
        })
        .collect();
    let https = Https {
        listen: "127.0.0.1:8443".parse().expect("an address"),
        certificates,
    };
    let picked = https.certificate_for(asked);
    assert_eq!(picked, oracle(&https, asked), "{asked:?}");
    if let Some(name) = asked {
        let upper = name.to_ascii_uppercase();
        assert_eq!(https.certificate_for(Some(&upper)), picked, "{upper:?}");
        let dotted = format!("{name}.");
        assert_eq!(https.certificate_for(Some(&dotted)), picked, "{dotted:?}");
    }
});

fn oracle(https: &Https, asked: Option<&str>) -> Option<usize> {
    let name = asked?.trim_end_matches('.').to_ascii_lowercase();
    let names = |i: usize| https.certificates[i].hostnames.iter().map(Hostname::as_str);
    let all = 0..https.certificates.len();
    let exact = |h: &str| !h.starts_with("*.") && h.to_ascii_lowercase() == name;
    if let Some(i) = all.clone().find(|&i| names(i).any(exact)) {
        return Some(i);
    }
    let mut best: Option<(usize, usize)> = None;
    for i in all {
        for h in names(i) {
            let Some(suffix) = h.strip_prefix("*.") else {
                continue;
            };
            let covers = name
                .strip_suffix(&suffix.to_ascii_lowercase())
                .and_then(|head| head.strip_suffix('.'))
                .is_some_and(|label| !label.is_empty());
            if covers && best.is_none_or(|(_, len)| suffix.len() > len) {
                best = Some((i, suffix.len()));
            }
        }
    }
    best.map(|(i, _)| i)
}
