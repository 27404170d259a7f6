//! The control plane's CA signing a proxy's certificate request (`Ca::issue`, what the control
//! port's `Issue` call runs on a request a peer wrote): whatever the bytes, an error or a leaf
//! that names exactly the identity asked for — one URI SAN, that identity, not a CA — signed
//! by the mesh's root and valid no longer than asked.
#![no_main]

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use hopwise_control::ca::{BACKDATE, Ca};
use libfuzzer_sys::fuzz_target;
use x509_parser::prelude::*;

const IDENTITY: &str = "spiffe://fuzz.local/service/a";
const LIFETIME: Duration = Duration::from_secs(3600);

fn ca() -> &'static (Ca, SystemTime) {
    static CA: OnceLock<(Ca, SystemTime)> = OnceLock::new();
    CA.get_or_init(|| {
        let now = SystemTime::now();
        (Ca::generate("fuzz", now).expect("a root").0, now)
    })
}

fuzz_target!(|data: &[u8]| {
    let (ca, now) = ca();
    // The bytes as a PEM text, and as the DER of a request in a PEM block of its own.
    let text = String::from_utf8_lossy(data).into_owned();
    let wrapped = format!(
        "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
        base64(data)
    );
    for pem in [text, wrapped] {
        let Ok(issued) = ca.issue(&pem, IDENTITY, LIFETIME, *now) else {
            continue;
        };
        let (_, block) = x509_parser::pem::parse_x509_pem(issued.cert_chain_pem.as_bytes())
            .expect("the leaf is PEM");
        let (_, cert) = parse_x509_certificate(&block.contents).expect("the leaf parses");
        assert!(!cert.is_ca(), "a leaf that is a CA");
        let san = cert
            .subject_alternative_name()
            .expect("SAN parses")
            .expect("a SAN");
        let names: Vec<String> = san
            .value
            .general_names
            .iter()
            .map(|n| format!("{n:?}"))
            .collect();
        assert_eq!(names, [format!("URI({IDENTITY:?})")], "{names:?}");
        let lifetime =
            cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
        let most = LIFETIME + BACKDATE;
        assert!(
            lifetime >= 0 && lifetime as u64 <= most.as_secs(),
            "valid for {lifetime} s"
        );
    }
});

/// Standard base64 with padding, in lines of 64 (a PEM body).
fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for (i, chunk) in data.chunks(3).enumerate() {
        if i > 0 && i % 16 == 0 {
            out.push('\n');
        }
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
