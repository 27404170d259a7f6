//! Transparent capture's addresses, resolved: which address each service has (declared, or the
//! next of the range's first /24 in file order, then of its top downward past 254 services), which /30 each copy run in its own network
//! namespace gets (host end, app end), what a destination outside the mesh meets, and the one
//! mapping a captured connection goes through: original destination → service or egress
//! ([`Destinations::get`]). Pure: the proxy and `hopwise run` call it, nothing here touches a
//! socket or a namespace.

use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use schemars::JsonSchema;
use serde::Serialize;

use crate::diag::Diagnostic;
use crate::mesh::Mesh;
use crate::raw::{RawCapture, RawService};
use crate::read::Locations;

/// The range copies' namespaces take their addresses from when the file names none.
pub const DEFAULT_RANGE: &str = "100.77.0.0/16";
/// Copies per service a range is laid out for (`raw::MAX_COPIES`).
const COPIES_PER_SERVICE: u32 = crate::raw::MAX_COPIES;

/// What a captured connection to an address outside the mesh meets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Egress {
    /// Closed at once, counted (the default: nothing leaves that the mesh file did not name).
    #[default]
    Refuse,
    /// Carried to the address as it is, counted.
    Pass,
}

impl Egress {
    pub const ALL: [(&'static str, Egress); 2] =
        [("refuse", Egress::Refuse), ("pass", Egress::Pass)];

    pub fn name(self) -> &'static str {
        match self {
            Egress::Refuse => "refuse",
            Egress::Pass => "pass",
        }
    }
}

/// An address range, `a.b.c.d/n` or an IPv6 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Cidr, String> {
        let bad = || format!("`{text}` is not an address range: write `a.b.c.d/n` or `x::/n`");
        let (ip, prefix) = text.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = ip.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!("`{text}`: a prefix of at most {max}"));
        }
        let cidr = Cidr { addr, prefix };
        if cidr.network() != addr {
            return Err(format!(
                "`{text}` has bits past its prefix: write `{}/{prefix}`",
                cidr.network()
            ));
        }
        Ok(cidr)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Cidr {
    /// A range for copies' namespaces: IPv4, room for the services' /24 and at least one copy.
    pub fn range(text: &str) -> Result<Cidr, String> {
        let c: Cidr = text.parse()?;
        if !c.addr.is_ipv4() || !(8..=22).contains(&c.prefix) {
            return Err(format!(
                "`{text}`: the capture range is an IPv4 range from /8 to /22 (services take its first /24, copies a /30 each after it)"
            ));
        }
        Ok(c)
    }

    fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let other = Cidr {
            addr: ip,
            prefix: self.prefix,
        };
        ip.is_ipv4() == self.addr.is_ipv4() && other.network() == self.addr
    }

    /// The `n`th IPv4 address of the range, if it is inside it.
    fn v4_at(&self, n: u32) -> Option<Ipv4Addr> {
        let IpAddr::V4(base) = self.addr else {
            return None;
        };
        (n < self.size()).then(|| Ipv4Addr::from(u32::from(base) + n))
    }

    /// How many IPv4 addresses the range holds (a capture range is /8 at most: it fits).
    fn size(&self) -> u32 {
        let bits = 32u32.saturating_sub(u32::from(self.prefix)).min(31);
        1u32 << bits
    }
}

/// `mesh.capture`, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Capture {
    pub range: Cidr,
    pub egress: Egress,
    pub skip_ports: Vec<u16>,
    pub skip_cidrs: Vec<Cidr>,
    /// `mesh.capture.up`: `hopwise up` runs its sample apps captured.
    pub up: bool,
    /// Services whose default address lies past the first /24: taken from the range's top,
    /// downward, so the copies' part ends below them.
    pub beyond: u32,
}

impl Default for Capture {
    fn default() -> Capture {
        Capture {
            range: Cidr {
                addr: IpAddr::V4(Ipv4Addr::new(100, 77, 0, 0)),
                prefix: 16,
            },
            egress: Egress::Refuse,
            skip_ports: Vec::new(),
            skip_cidrs: Vec::new(),
            up: false,
            beyond: 0,
        }
    }
}

/// A copy's namespace link: a /30 whose first address is the host's end of the veth pair and
/// whose second is the copy's end (the app's address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CopyNet {
    pub host: Ipv4Addr,
    pub app: Ipv4Addr,
}

impl CopyNet {
    pub const PREFIX: u8 = 30;
}

impl Capture {
    /// The /30 of copy `copy` of the service at `ordinal` in the file, if the range holds it.
    pub fn copy_net(&self, ordinal: usize, copy: usize) -> Option<CopyNet> {
        let copy = u32::try_from(copy)
            .ok()
            .filter(|c| *c < COPIES_PER_SERVICE)?;
        let block = u32::try_from(ordinal)
            .ok()?
            .checked_mul(COPIES_PER_SERVICE)?
            .checked_add(copy)?;
        let first = block.checked_mul(4)?.checked_add(256)?;
        // The whole /30 below the services taken from the top.
        (first.checked_add(3)? < self.copies_end()).then_some(())?;
        let host = self.range.v4_at(first + 1)?;
        let app = self.range.v4_at(first + 2)?;
        Some(CopyNet { host, app })
    }

    /// Where the copies' part ends: the lowest offset services past the first /24 take.
    fn copies_end(&self) -> u32 {
        let size = self.range.size();
        size.saturating_sub(1).saturating_sub(self.beyond)
    }

    /// Is `ip` in the part of the range copies' links take (past its first /24, below the
    /// services taken from the top)?
    fn in_copies_part(&self, ip: IpAddr) -> bool {
        match (ip, self.range.addr) {
            (IpAddr::V4(a), IpAddr::V4(base)) if self.range.contains(ip) => {
                let offset = u32::from(a) - u32::from(base);
                offset >= 256 && offset < self.copies_end()
            }
            _ => false,
        }
    }

    /// The default address of the service at `ordinal`: the range's first /24 from `.1`, then
    /// (a mesh of more than 254 services) from the range's top downward, below its last
    /// address: `100.77.255.254`, `.253`, … in a /16.
    fn default_address(&self, ordinal: usize) -> Option<IpAddr> {
        let n = u32::try_from(ordinal).ok()?;
        if n < 254 {
            return self.range.v4_at(n + 1).map(IpAddr::V4);
        }
        let offset = self.range.size().checked_sub(2 + (n - 254))?;
        // Never into the first /24 or the copies a range of this size must still hold.
        (offset >= 256 + 4)
            .then(|| self.range.v4_at(offset))
            .flatten()
            .map(IpAddr::V4)
    }
}

/// Where a captured connection goes, by its original destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination<'m> {
    /// A service of the mesh: its address, or one of its copies' namespace addresses.
    Service(&'m str),
    /// Nothing of the mesh's: the egress rule.
    Egress(Egress),
}

/// Every address of the mesh's services (theirs, and their copies' in their namespaces) with
/// the egress rule: what a proxy keeps to map captured connections without the whole mesh.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Destinations {
    addresses: Vec<(IpAddr, String)>,
    pub egress: Egress,
}

impl Destinations {
    pub fn of(mesh: &Mesh) -> Destinations {
        let mut addresses = Vec::new();
        for (ordinal, s) in mesh.services.values().enumerate() {
            addresses.extend(s.address.map(|a| (a, s.name.clone())));
            let copies = (0..s.copies.len().max(1))
                .filter_map(|c| mesh.capture.copy_net(ordinal, c))
                .map(|n| (IpAddr::V4(n.app), s.name.clone()));
            addresses.extend(copies);
        }
        Destinations {
            addresses,
            egress: mesh.capture.egress,
        }
    }

    /// The one mapping of a captured connection's original destination. Pure.
    pub fn get(&self, ip: IpAddr) -> Destination<'_> {
        // An IPv4 address seen through an IPv6 socket is still that address.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.addresses
            .iter()
            .find(|(a, _)| *a == ip)
            .map_or(Destination::Egress(self.egress), |(_, s)| {
                Destination::Service(s)
            })
    }
}

impl Mesh {
    /// The namespace link of copy `copy` of `service`, if the range holds it.
    pub fn copy_net(&self, service: &str, copy: usize) -> Option<CopyNet> {
        self.capture
            .copy_net(self.services.get_index_of(service)?, copy)
    }
}

/// `mesh.capture` resolved (the reader checked each value), and each service's address:
/// declared, or the default; two services on one address, or a declared one inside the
/// copies' part of the range, are errors at the service's `address`.
pub(crate) fn resolve(
    raw: Option<&RawCapture>,
    services: &indexmap::IndexMap<String, RawService>,
    locations: &Locations,
    diags: &mut Vec<Diagnostic>,
) -> (Capture, Vec<Option<IpAddr>>) {
    let d = Capture::default();
    let capture = match raw {
        None => d,
        Some(raw) => Capture {
            range: raw
                .range
                .as_deref()
                .and_then(|r| Cidr::range(r).ok())
                .unwrap_or(d.range),
            egress: raw.egress.unwrap_or_default(),
            skip_ports: raw.skip_ports.clone(),
            skip_cidrs: raw
                .skip_cidrs
                .iter()
                .filter_map(|c| c.parse().ok())
                .collect(),
            up: raw.up.unwrap_or(d.up),
            beyond: 0,
        },
    };
    // Every service past the 254th takes its default address from the top: counted before any
    // copy's /30 is laid out, so no copy lands on one.
    let capture = Capture {
        beyond: u32::try_from(services.len().saturating_sub(254)).unwrap_or(u32::MAX),
        ..capture
    };
    let mut seen: Vec<(IpAddr, &str)> = Vec::new();
    let mut addresses = Vec::new();
    for (ordinal, (name, s)) in services.iter().enumerate() {
        let path = format!("services.{name}.address");
        let declared = s.address.as_deref().and_then(|a| a.parse::<IpAddr>().ok());
        let address = declared.or_else(|| capture.default_address(ordinal));
        let mut problem = |message: String| {
            diags.push(Diagnostic::new(&path, locations.of(&path), message));
        };
        if let Some(ip) = address {
            if let Some((_, other)) = seen.iter().find(|(a, _)| *a == ip) {
                problem(format!(
                    "{ip} is also {other}'s address: each service needs its own"
                ));
            }
            if declared.is_some() && capture.in_copies_part(ip) {
                problem(format!(
                    "{ip} is in the part of mesh.capture.range ({}) that copies' namespaces take: choose one in its first /24, at its top or outside it",
                    capture.range
                ));
            }
            seen.push((ip, name));
        } else if s.external.is_none() {
            problem(format!(
                "mesh.capture.range ({}) has no address left for this service beside the copies' part: widen it or declare this one's",
                capture.range
            ));
        }
        addresses.push(address);
    }
    (capture, addresses)
}

#[cfg(test)]
mod tests;
