//! The two addresses a proxy's `Register` names, read by the control plane: `inbound_addr` (where
//! its copy takes calls, `hopwise_control::plane::inbound_addr`) and `admin_addr` (where the
//! dashboard reads its `/metrics`, `hopwise_control::plane::admin_addr`, given the IP the call
//! came from). Any bytes: the first line the caller's IP (none when it does not read as one),
//! the second the admin address, the rest the inbound address, as sent. Never a panic, and:
//! - an inbound address is accepted exactly when the text (trimmed) is `ip:port`, port not 0,
//!   the IP not unspecified in any spelling (an IPv4-mapped `::ffff:0.0.0.0` is 0.0.0.0: the
//!   proxies dialling it would reach their own host); the address accepted is the one written,
//!   and it prints back to text read as itself;
//! - an admin address is refused as bad exactly when the text is not `ip:port` or names port 0;
//!   one accepted has the port written, an IP that is the caller's (unspecified read as the
//!   caller's) or loopback from a loopback caller, in its canonical form, and prints back to
//!   text read as itself from the same caller; any other is foreign, and so is every one from
//!   a caller not known.
#![no_main]

use std::net::{IpAddr, SocketAddr};

use hopwise_control::plane::{ApiError, admin_addr, inbound_addr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.splitn(3, '\n');
    // A connection's peer: never an unspecified address.
    let from = lines
        .next()
        .and_then(|l| l.parse::<IpAddr>().ok())
        .filter(|ip| !ip.to_canonical().is_unspecified());
    let admin = lines.next().unwrap_or("");
    let inbound = lines.next().unwrap_or("");
    check_inbound(inbound);
    check_admin(admin, from);
});

fn check_inbound(text: &str) {
    let sent: Option<SocketAddr> = text.trim().parse().ok();
    let usable = sent.filter(|a| a.port() != 0 && !a.ip().to_canonical().is_unspecified());
    match inbound_addr(text) {
        Ok(addr) => {
            assert_eq!(Some(addr), usable, "{text:?}");
            assert_eq!(inbound_addr(&addr.to_string()).ok(), Some(addr));
        }
        Err(ApiError::BadAddress(t)) => {
            assert_eq!(usable, None, "{text:?} refused");
            assert_eq!(t, text);
        }
        Err(e) => panic!("{text:?}: {e}"),
    }
}

fn check_admin(text: &str, from: Option<IpAddr>) {
    let sent: Option<SocketAddr> = text.trim().parse().ok();
    let well_formed = sent.filter(|a| a.port() != 0);
    match admin_addr(text, from) {
        Ok(addr) => {
            let sent = well_formed.expect("accepted what is not ip:port");
            let from = from
                .expect("accepted from an unknown caller")
                .to_canonical();
            assert_eq!(addr.port(), sent.port());
            assert_eq!(addr.ip(), addr.ip().to_canonical(), "not canonical");
            assert!(
                addr.ip() == from || (addr.ip().is_loopback() && from.is_loopback()),
                "{addr} from {from}"
            );
            if !sent.ip().is_unspecified() {
                assert_eq!(addr.ip(), sent.ip().to_canonical());
            }
            assert!(!addr.ip().is_unspecified());
            assert_eq!(admin_addr(&addr.to_string(), Some(from)).ok(), Some(addr));
        }
        Err(ApiError::BadAddress(t)) => {
            assert_eq!(well_formed, None, "{text:?} refused as bad");
            assert_eq!(t, text);
        }
        Err(ApiError::ForeignAdmin { .. }) => {
            let sent = well_formed.expect("foreign, yet not ip:port");
            if let Some(from) = from.map(|f| f.to_canonical()) {
                let ip = if sent.ip().is_unspecified() {
                    from
                } else {
                    sent.ip().to_canonical()
                };
                assert!(
                    ip != from && !(ip.is_loopback() && from.is_loopback()),
                    "{text:?} from {from} called foreign"
                );
            }
        }
        Err(e) => panic!("{text:?}: {e}"),
    }
}
