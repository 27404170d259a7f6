//! The proxy's side of `Issue`: an `IssueResponse` as the control plane answers it, taken (or not)
//! by `hopwise_proxy::control::issued::read` before anything is written, for a fixed key this
//! proxy made, and its end planned (`issued::not_after`, `issued::renewal_at`). Input: 16 bytes
//! (`not_after_unix` and `ca_generation`, little-endian), then the certificate chain's PEM text,
//! a NUL, the trust bundle's. Never a panic, and:
//! - an answer is taken exactly when `tls::CertStore` loads the same chain, key and bundle from
//!   files (the bundle the answer's, or, when the cache has one, a good one): nothing written
//!   that the store would then refuse, nothing refused that it would load;
//! - what is taken is what was sent (the bundle only when asked for), its leaf, read by
//!   x509-parser, holds exactly this key's public key (rcgen's reading of it);
//! - the end is the time `not_after_unix` says (the epoch for any time before it), and the
//!   renewal falls between now and that end, at 65 % to 75 % of the life left.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hopwise_proxy::control::issued::{self, Issued};
use hopwise_proxy::control::pb::IssueResponse;
use hopwise_proxy::tls::{CertFiles, CertStore};
use libfuzzer_sys::fuzz_target;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// A P-256 key made with openssl for this target alone (it protects nothing); the seeds hold a
/// leaf a throwaway CA signed for it.
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgdH+osXi49/3ZjeRR\nBwmLw5GrvQ+6gqADnUOk0eykVi2hRANCAASqPe7p18BXqGr18OhwUlVdGjIBNU5T\ndHMUs9biZWD6q9FsVknbDcgb4Ld24vCI8QHuNaOtF1mUxAWB0dmvaeLw\n-----END PRIVATE KEY-----\n";
/// That CA: a bundle the store loads.
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBjDCCATGgAwIBAgIUUhVhCYPgeOVOUJNtg7WCzMqPUrYwCgYIKoZIzj0EAwIw\nEjEQMA4GA1UEAwwHZnV6eiBDQTAgFw0yNjEyMDcxNzM0NThaGA8yMTI2MTExMzE3\nMzQ1OFowEjEQMA4GA1UEAwwHZnV6eiBDQTBZMBMGByqGSM49AgEGCCqGSM49AwEH\nA0IABEADJANQrefgJSQCvlG/WV3fA+rlBWciubCRn3BbsYVaFx2Ow41frR4gL66R\nVADo8Ijpcm2B6/3zsg4ECG1Hm8OjYzBhMB0GA1UdDgQWBBR/kXQqUxTEfj01iZuu\nxcLWF88VPjAfBgNVHSMEGDAWgBR/kXQqUxTEfj01iZuuxcLWF88VPjAPBgNVHRMB\nAf8EBTADAQH/MA4GA1UdDwEB/wQEAwIBBjAKBggqhkjOPQQDAgNJADBGAiEAnLuB\nKHK3vwoBRbLxGDJ9bdAG6BO8Yf4f5T88M/FnZLsCIQCDc5Ehw5kAZm2WTSC1EmOz\niRvnwI4HfOnJ5Oi8PrfVQA==\n-----END CERTIFICATE-----\n";

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let (head, rest) = data.split_at(16);
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (chain, bundle) = text.split_once('\0').unwrap_or((text, ""));
    let word = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().expect("8 bytes"));
    let resp = IssueResponse {
        cert_chain_pem: chain.to_owned(),
        trust_bundle_pem: bundle.to_owned(),
        not_after_unix: word(0) as i64,
        identity: String::new(),
        ca_generation: word(8),
    };
    for with_bundle in [true, false] {
        let taken = issued::read(resp.clone(), KEY, with_bundle);
        let ca = if with_bundle { bundle } else { CA };
        assert_eq!(
            taken.is_ok(),
            loads(chain, ca),
            "{taken:?}, with_bundle {with_bundle}"
        );
        if let Ok(t) = taken {
            as_sent(&t, &resp, with_bundle);
        }
    }
    planned(resp.not_after_unix, word(8));
});

/// Whether the TLS store loads these files.
fn loads(chain: &str, ca: &str) -> bool {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        // Memory, where there is some: a file rewritten per input on a disk costs milliseconds.
        let shm = std::path::Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_owned()
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("hopwise-fuzz-issue-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a temporary directory");
        d
    });
    let files = CertFiles::in_dir(dir, "pricing");
    std::fs::write(&files.cert, chain).expect("written");
    std::fs::write(&files.key, KEY).expect("written");
    std::fs::write(&files.ca, ca).expect("written");
    CertStore::open(files).is_ok()
}

fn as_sent(t: &Issued, resp: &IssueResponse, with_bundle: bool) {
    assert_eq!(t.cert_chain_pem, resp.cert_chain_pem);
    assert_eq!(t.generation, resp.ca_generation);
    assert_eq!(t.not_after, issued::not_after(resp.not_after_unix));
    let bundle = with_bundle.then(|| resp.trust_bundle_pem.clone());
    assert_eq!(t.trust_bundle_pem, bundle);
    static SPKI: OnceLock<Vec<u8>> = OnceLock::new();
    let spki = SPKI.get_or_init(|| {
        let key = rcgen::KeyPair::from_pem(KEY).expect("the key");
        rcgen::PublicKeyData::subject_public_key_info(&key)
    });
    let leaf = CertificateDer::pem_slice_iter(t.cert_chain_pem.as_bytes())
        .next()
        .expect("a chain taken has a certificate")
        .expect("and it reads");
    // Where x509-parser reads the leaf too (webpki may read more), its key is this one.
    if let Ok((_, cert)) = x509_parser::parse_x509_certificate(&leaf) {
        assert_eq!(
            cert.public_key().raw,
            spki.as_slice(),
            "the leaf is not for this key"
        );
    }
}

fn planned(unix: i64, draw_bits: u64) {
    let end = issued::not_after(unix);
    let want = UNIX_EPOCH + Duration::from_secs(u64::try_from(unix).unwrap_or(0));
    assert_eq!(end, want);
    let draw = (draw_bits >> 11) as f64 / (1u64 << 53) as f64;
    for now in [
        UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        SystemTime::now(),
    ] {
        let at = issued::renewal_at(now, end, draw);
        assert!(at >= now, "renewal before now");
        let Ok(life) = end.duration_since(now) else {
            assert_eq!(at, now, "an ended certificate is renewed at once");
            continue;
        };
        assert!(at <= end, "renewal after the end");
        let share = at.duration_since(now).expect("after now").as_secs_f64() / life.as_secs_f64();
        if life > Duration::from_secs(1) {
            assert!(
                (0.65 - 1e-6..=0.75 + 1e-6).contains(&share),
                "{share} of {life:?}"
            );
        }
    }
}
