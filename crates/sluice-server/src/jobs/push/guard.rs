//! Which addresses push requests may go to.
//!
//! A push target names its endpoint, and whoever may configure a queue chooses it; without a
//! rule, that would let them make the broker call anything it can reach: its own listeners
//! (which then act for no key at all), a database's HTTP port on loopback, a cloud metadata
//! service. So push goes to public addresses only, unless the operator lists others in
//! `push_allow` (CIDRs or host names), and never to this broker's own listeners.
//!
//! The rule is checked when a target is set (a 400 naming the address), and again on the
//! address each connection is actually made to: the push client resolves names through
//! [`GuardedResolver`], so a name that resolved to a public address when it was set and to
//! loopback later (DNS rebinding) is still refused. Redirects are never followed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ipnet::IpNet;
use sluice_core::{PushTarget, StoreError};

/// How long the check at configuration time waits for a name to resolve; a name that does
/// not resolve in time is checked when the broker connects.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// One `push_allow` entry: a network (CIDR, or one address) or a host name whose targets may
/// be at addresses that are not public.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushAllow {
    /// Addresses in this network.
    Net(IpNet),
    /// Targets whose URL names this host (lower case, without a trailing dot), wherever it
    /// resolves.
    Host(String),
}

/// A `push_allow` entry that is neither a CIDR, an address nor a host name.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "push_allow entry \"{0}\" is not a CIDR (10.0.0.0/8, fd00::/8), an address (127.0.0.1) or a \
     host name (hooks.internal)"
)]
pub struct BadPushAllow(String);

impl FromStr for PushAllow {
    type Err = BadPushAllow;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(PushAllow::Net(net.trunc()));
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(PushAllow::Net(IpNet::from(ip)));
        }
        let name = s.trim_end_matches('.').to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(BadPushAllow(s.to_owned()));
        }
        Ok(PushAllow::Host(name))
    }
}

impl std::fmt::Display for PushAllow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushAllow::Net(n) => n.fmt(f),
            PushAllow::Host(h) => f.write_str(h),
        }
    }
}

/// Why a push target's address is refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refused {
    /// The address is one of this broker's listeners.
    #[error(
        "{addr} is this broker's own {listener} listener, which push never calls (whatever \
         push_allow says): a push target must be another service"
    )]
    OwnListener {
        /// The address.
        addr: SocketAddr,
        /// Which listener (`http`, `frames`, `sqs`).
        listener: &'static str,
    },
    /// The address is not public and `push_allow` does not list it.
    #[error(
        "{ip} is a {kind} address, which push calls only when the broker's push_allow lists \
         it: add \"{suggest}\" (or the target's host name) to push_allow in the config file, \
         or start the broker with --push-allow {suggest}"
    )]
    NotPublic {
        /// The address.
        ip: IpAddr,
        /// What kind of address it is.
        kind: &'static str,
        /// The entry that would allow exactly this address.
        suggest: IpNet,
    },
}

/// A target's host name resolved only to refused addresses (the last one's reason).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{name} resolves to an address that is refused: {refused}")]
pub struct RefusedName {
    /// The host name.
    pub name: String,
    /// Why its address is refused.
    pub refused: Refused,
}

/// The push rules of one broker: plain `http`, `push_allow`, and its own listeners.
#[derive(Debug, Default)]
pub struct PushRules {
    allow_http: bool,
    allow: Vec<PushAllow>,
    own: RwLock<Vec<(&'static str, SocketAddr)>>,
}

impl PushRules {
    /// Rules with plain `http` off loopback allowed or not, and the `allow` list.
    pub fn new(allow_http: bool, allow: Vec<PushAllow>) -> Self {
        PushRules {
            allow_http,
            allow,
            own: RwLock::new(Vec::new()),
        }
    }

    /// Records one of this broker's listeners (`name` as in `/metrics`), which push never
    /// calls.
    pub fn add_own(&self, name: &'static str, addr: SocketAddr) {
        if let Ok(mut own) = self.own.write() {
            own.push((name, addr));
        }
    }

    /// Whether the target's scheme may be used: `https`, or `http` on loopback unless plain
    /// `http` is allowed everywhere.
    pub fn scheme_allowed(&self, target: &PushTarget) -> bool {
        if self.allow_http {
            target.parsed_url().is_ok()
        } else {
            target.is_secure_or_loopback()
        }
    }

    /// Whether push may connect to `addr` for a target whose URL names `host` (a name, or
    /// `None` for an address).
    ///
    /// # Errors
    /// [`Refused`] saying what the address is and how to allow it, if it can be.
    pub fn check_addr(&self, host: Option<&str>, addr: SocketAddr) -> Result<(), Refused> {
        let ip = canonical(addr.ip());
        if let Some(listener) = self.own_listener(ip, addr.port()) {
            return Err(Refused::OwnListener { addr, listener });
        }
        let Some(kind) = not_public(ip) else {
            return Ok(());
        };
        let host = host.map(|h| h.trim_end_matches('.').to_ascii_lowercase());
        let listed = self.allow.iter().any(|a| match a {
            PushAllow::Net(n) => n.contains(&ip) || n.contains(&addr.ip()),
            PushAllow::Host(h) => host.as_deref() == Some(h.as_str()),
        });
        if listed {
            return Ok(());
        }
        Err(Refused::NotPublic {
            ip,
            kind,
            suggest: IpNet::from(ip),
        })
    }

    /// The check of a target whose URL names an address (not a host name): a name is checked
    /// on each connection instead, by [`GuardedResolver`].
    ///
    /// # Errors
    /// [`Refused`] when the URL's address is refused.
    pub fn check_literal(&self, target: &PushTarget) -> Result<(), Refused> {
        let Ok(url) = target.parsed_url() else {
            return Ok(());
        };
        let port = url.port_or_known_default().unwrap_or(0);
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.check_addr(None, (ip, port).into()),
            Some(url::Host::Ipv6(ip)) => self.check_addr(None, (ip, port).into()),
            _ => Ok(()),
        }
    }

    /// Every rule, as a queue's target is set: the scheme, and each address its host resolves
    /// to now. A name that does not resolve (yet) is accepted; it is checked when the broker
    /// connects.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the URL (as views show it), the address and how
    /// to allow it.
    pub async fn check_target(&self, target: &PushTarget) -> Result<(), StoreError> {
        let url = target.parsed_url()?;
        let shown = target.shown_url();
        let refused = |e: Refused| StoreError::invalid(format!("push.url \"{shown}\": {e}"));
        self.check_literal(target).map_err(refused)?;
        if !self.scheme_allowed(target) {
            return Err(StoreError::invalid(format!(
                "push.url \"{shown}\" is plain http to a host that is not loopback: use https, \
                 or start the broker with --push-allow-http (push_allow_http = true) when the \
                 network in between is trusted"
            )));
        }
        let (Some(url::Host::Domain(name)), Some(port)) = (url.host(), url.port_or_known_default())
        else {
            return Ok(());
        };
        let Ok(Ok(addrs)) =
            tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((name, port))).await
        else {
            return Ok(());
        };
        for addr in addrs {
            self.check_addr(Some(name), addr).map_err(|refused| {
                let e = RefusedName {
                    name: name.to_owned(),
                    refused,
                };
                StoreError::invalid(format!("push.url \"{shown}\": {e}"))
            })?;
        }
        Ok(())
    }

    fn own_listener(&self, ip: IpAddr, port: u16) -> Option<&'static str> {
        let own = self.own.read().ok()?;
        own.iter().find_map(|(name, l)| {
            let bound = canonical(l.ip());
            let same = l.port() == port
                // A listener on every interface answers on each of this machine's addresses,
                // which the broker cannot tell from another's: its port is refused anywhere.
                && (bound.is_unspecified()
                    || ip.is_unspecified()
                    || ip == bound
                    || (ip.is_loopback() && bound.is_loopback()));
            same.then_some(*name)
        })
    }
}

/// `ip` as IPv4 when it is an IPv4 address written as IPv6 (mapped, or in the NAT64 or 6to4
/// prefixes, which carry it to the IPv4 address they embed).
fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let embedded = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    };
    // 64:ff9b::/96 (NAT64, well-known prefix).
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return embedded(s[6], s[7]);
    }
    // 2002::/16 (6to4).
    if s[0] == 0x2002 {
        return embedded(s[1], s[2]);
    }
    ip
}

/// What kind of address `ip` is when it is not a public one, or `None` for a public address.
fn not_public(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => not_public_v4(v4),
        IpAddr::V6(v6) => not_public_v6(v6),
    }
}

fn not_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, d] = ip.octets();
    let kind =
        if [[169, 254, 169, 254], [100, 100, 100, 200], [192, 0, 0, 192]].contains(&[a, b, c, d]) {
            "cloud metadata"
        } else if ip.is_unspecified() || a == 0 {
            "unspecified"
        } else if ip.is_loopback() {
            "loopback"
        } else if ip.is_link_local() {
            "link-local"
        } else if ip.is_private() {
            "private"
        } else if a == 100 && (64..128).contains(&b) {
            "shared (carrier-grade NAT)"
        } else if ip.is_multicast() {
            "multicast"
        } else if ip.is_broadcast() || a >= 240 {
            "reserved"
        } else if (a, b, c) == (192, 0, 0) || (a == 198 && (18..20).contains(&b)) {
            "special-purpose"
        } else if ip.is_documentation() {
            "documentation"
        } else {
            return None;
        };
    Some(kind)
}

fn not_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    let kind = if s == [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254] {
        "cloud metadata"
    } else if ip.is_unspecified() {
        "unspecified"
    } else if ip.is_loopback() {
        "loopback"
    } else if ip.is_unicast_link_local() || (s[0] & 0xffc0) == 0xfec0 {
        "link-local"
    } else if ip.is_unique_local() {
        "unique local (private)"
    } else if ip.is_multicast() {
        "multicast"
    } else if s[..6] == [0, 0, 0, 0, 0, 0] {
        // ::/96, IPv4-compatible (deprecated): the IPv4 address it names decides nothing
        // reachable publicly.
        "reserved"
    } else if s[0] == 0x2001 && s[1] == 0x0db8 {
        "documentation"
    } else if (s[0] & 0xe000) != 0x2000 {
        // Outside 2000::/3, the only global unicast space assigned.
        "reserved"
    } else {
        return None;
    };
    Some(kind)
}

/// The push client's resolver: the target's host name resolved as the system resolver does,
/// keeping only the addresses [`PushRules::check_addr`] accepts for its port, so the address
/// a connection is made to is one that was checked.
pub struct GuardedResolver {
    rules: Arc<PushRules>,
    port: u16,
}

impl GuardedResolver {
    /// A resolver for a target on `port`.
    pub fn new(rules: Arc<PushRules>, port: u16) -> Self {
        GuardedResolver { rules, port }
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let rules = self.rules.clone();
        let port = self.port;
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), port))
                .await?
                .collect();
            let mut refused = None;
            let mut kept = Vec::with_capacity(found.len());
            for addr in found {
                match rules.check_addr(Some(&name), addr) {
                    Ok(()) => kept.push(addr),
                    Err(e) => refused = Some(e),
                }
            }
            match (kept.is_empty(), refused) {
                (true, Some(refused)) => Err(Box::new(RefusedName { name, refused }) as _),
                _ => Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn only_public_addresses_pass_without_an_entry() {
        for (addr, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.8.9.10", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("64:ff9b::7f00:1", "loopback"),
            ("2002:7f00:1::", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("fd12::1", "unique local (private)"),
            ("169.254.1.1", "link-local"),
            ("fe80::1", "link-local"),
            ("169.254.169.254", "cloud metadata"),
            ("fd00:ec2::254", "cloud metadata"),
            ("100.100.100.200", "cloud metadata"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
            ("255.255.255.255", "reserved"),
        ] {
            assert_eq!(not_public(ip(addr)), Some(kind), "{addr}");
        }
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
        ] {
            assert_eq!(not_public(ip(public)), None, "{public}");
        }
    }

    #[test]
    fn entries_allow_networks_and_host_names() {
        let rules = PushRules::new(
            false,
            vec![
                "127.0.0.1".parse().expect("an address"),
                "10.0.0.0/8".parse().expect("a CIDR"),
                "Hooks.Internal.".parse().expect("a name"),
            ],
        );
        let at = |s: &str| SocketAddr::new(ip(s), 8080);
        rules.check_addr(None, at("127.0.0.1")).expect("listed");
        rules
            .check_addr(None, at("::ffff:127.0.0.1"))
            .expect("listed");
        rules.check_addr(None, at("10.9.9.9")).expect("listed");
        rules
            .check_addr(Some("hooks.internal"), at("192.168.0.7"))
            .expect("its name is listed");
        let e = rules
            .check_addr(Some("other.internal"), at("192.168.0.7"))
            .expect_err("not listed");
        assert!(e.to_string().contains("--push-allow 192.168.0.7/32"), "{e}");
        rules
            .check_addr(None, at("127.0.0.2"))
            .expect_err("not listed");
        assert!("not a name!".parse::<PushAllow>().is_err());
        assert!("".parse::<PushAllow>().is_err());
    }

    #[test]
    fn own_listeners_are_refused_even_when_allowed() {
        let rules = PushRules::new(false, vec!["0.0.0.0/0".parse().expect("a CIDR")]);
        rules.add_own("http", "127.0.0.1:7878".parse().expect("an address"));
        rules.add_own("sqs", "0.0.0.0:9324".parse().expect("an address"));
        let refused = |s: &str| {
            let addr: SocketAddr = s.parse().expect("an address");
            rules.check_addr(None, addr).is_err()
        };
        assert!(refused("127.0.0.1:7878"));
        assert!(refused("127.0.0.2:7878"));
        assert!(refused("0.0.0.0:7878"));
        assert!(refused("[::ffff:127.0.0.1]:7878"));
        assert!(refused("10.0.0.5:9324"));
        assert!(!refused("127.0.0.1:7879"));
    }
}
