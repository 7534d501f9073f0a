//! Who may start work on the shared device, and how often: the optional access token and
//! the per-client rate limit. Reading (pages, reports, permalinks, embeds) is never gated;
//! only requests that would put work on the device pass through here. (Which *pages* may
//! send such requests at all is the origin check's concern, in `origin.rs`.)
//!
//! The rate limit is `governor`'s keyed GCRA limiter; secrets are compared with `subtle`.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{header, HeaderMap};
use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use subtle::ConstantTimeEq;

/// Starting runs: the token people must present, and how often each client may.
pub struct Guard {
    token: Option<String>,
    limiter: Option<Limiter>,
    trusted_hops: usize,
}

/// Why a request may not start work.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    /// No token, or the wrong one.
    Unauthorized,
    /// This client used up its runs; try again after this long.
    RateLimited {
        retry_after: Duration,
        per_minute: u32,
    },
}

struct Limiter {
    per_minute: u32,
    inner: RateLimiter<Option<IpAddr>, DashMapStateStore<Option<IpAddr>>, DefaultClock>,
}

/// Keys the limiter keeps before it forgets the clients whose allowance is whole again.
const LIMITER_KEYS: usize = 10_000;

impl Guard {
    /// `trusted_hops`: how many proxies in front of this server append to X-Forwarded-For
    /// (0: none; the socket's address is the client).
    pub fn new(token: Option<String>, runs_per_minute: u32, trusted_hops: usize) -> Guard {
        Guard {
            token: token.filter(|t| !t.is_empty()),
            limiter: NonZeroU32::new(runs_per_minute).map(|n| Limiter {
                per_minute: n.get(),
                // A burst of `n`, refilled evenly over a minute.
                inner: RateLimiter::dashmap(Quota::per_minute(n)),
            }),
            trusted_hops,
        }
    }

    /// Everything open, no limit (tests, the CLI).
    pub fn open() -> Guard {
        Guard::new(None, 0, 0)
    }

    pub fn token_required(&self) -> bool {
        self.token.is_some()
    }

    /// Checks the token, then charges one run to the client.
    pub fn admit(
        &self,
        headers: &HeaderMap,
        peer: Option<&ConnectInfo<SocketAddr>>,
    ) -> Result<(), Refusal> {
        self.authorize(headers)?;
        self.charge(headers, peer)
    }

    /// Whether the request carries the token (always, when none is configured).
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        if let Some(expected) = &self.token {
            let given = presented_token(headers).ok_or(Refusal::Unauthorized)?;
            if !secrets_equal(given, expected) {
                return Err(Refusal::Unauthorized);
            }
        }
        Ok(())
    }

    /// Charges one run to the request's client, or says when it may try again.
    pub fn charge(
        &self,
        headers: &HeaderMap,
        peer: Option<&ConnectInfo<SocketAddr>>,
    ) -> Result<(), Refusal> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        if limiter.inner.len() > LIMITER_KEYS {
            limiter.inner.retain_recent();
        }
        limiter
            .inner
            .check_key(&self.client(headers, peer))
            .map_err(|not_until| {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                Refusal::RateLimited {
                    retry_after: Duration::from_secs(wait.as_secs_f64().ceil().max(1.0) as u64),
                    per_minute: limiter.per_minute,
                }
            })
    }

    /// The client a request counts against. Behind `trusted_hops` proxies that each append
    /// the address they received from, the client is the address that many entries from
    /// the right of X-Forwarded-For: entries further left were written by the client itself
    /// and prove nothing. Without trusted proxies (or too short a header), the socket's.
    pub fn client(
        &self,
        headers: &HeaderMap,
        peer: Option<&ConnectInfo<SocketAddr>>,
    ) -> Option<IpAddr> {
        let socket = peer.map(|c| c.0.ip());
        if self.trusted_hops == 0 {
            return socket;
        }
        // Several X-Forwarded-For lines are one list, in order.
        let entries: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        entries
            .len()
            .checked_sub(self.trusted_hops)
            .and_then(|i| entries[i].parse().ok())
            .or(socket)
    }
}

/// Compares two secrets in time that does not depend on where they differ.
pub fn secrets_equal(given: &str, expected: &str) -> bool {
    bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

/// `Authorization: Bearer <token>` (or `X-Gradless-Token: <token>`).
fn presented_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| {
            headers
                .get("x-gradless-token")
                .and_then(|v| v.to_str().ok())
        })
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(ip: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", ip.parse().unwrap());
        h
    }

    #[test]
    fn a_burst_is_allowed_then_refused_with_a_wait() {
        let guard = Guard::new(None, 6, 1);
        for _ in 0..6 {
            guard.charge(&from("10.0.0.1"), None).unwrap();
        }
        let Err(Refusal::RateLimited {
            retry_after,
            per_minute,
        }) = guard.charge(&from("10.0.0.1"), None)
        else {
            panic!("the 7th run passed")
        };
        assert_eq!(per_minute, 6);
        // 6 per minute refill one every 10 s: the wait is at most that, and at least 1 s.
        assert!((1..=10).contains(&retry_after.as_secs()), "{retry_after:?}");
        guard
            .charge(&from("10.0.0.2"), None)
            .expect("another client has its own allowance");
    }

    #[test]
    fn the_token_must_match_exactly() {
        let guard = Guard::new(Some("s3cret".into()), 0, 0);
        let mut h = HeaderMap::new();
        assert_eq!(guard.admit(&h, None), Err(Refusal::Unauthorized));
        h.insert(header::AUTHORIZATION, "Bearer s3cre".parse().unwrap());
        assert_eq!(guard.admit(&h, None), Err(Refusal::Unauthorized));
        h.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert_eq!(guard.admit(&h, None), Ok(()));
        let mut h = HeaderMap::new();
        h.insert("x-gradless-token", "s3cret".parse().unwrap());
        assert_eq!(guard.admit(&h, None), Ok(()));
        assert!(Guard::open().admit(&HeaderMap::new(), None).is_ok());
    }

    #[test]
    fn forwarded_for_counts_hops_from_the_right() {
        // The client wrote "6.6.6.6"; the one proxy appended the address it saw.
        let h = from("6.6.6.6, 192.0.2.7");
        let peer = ConnectInfo("127.0.0.1:5000".parse::<SocketAddr>().unwrap());
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(
            Guard::new(None, 1, 1).client(&h, Some(&peer)),
            ip("192.0.2.7")
        );
        assert_eq!(
            Guard::new(None, 1, 2).client(&h, Some(&peer)),
            ip("6.6.6.6")
        );
        // More hops than entries: the header cannot be trusted, the socket counts.
        assert_eq!(
            Guard::new(None, 1, 3).client(&h, Some(&peer)),
            ip("127.0.0.1")
        );
        assert_eq!(
            Guard::new(None, 1, 0).client(&h, Some(&peer)),
            ip("127.0.0.1")
        );
        // Varying the client-written part does not change who is charged.
        let guard = Guard::new(None, 1, 1);
        guard.charge(&from("1.1.1.1, 192.0.2.9"), None).unwrap();
        assert!(guard.charge(&from("2.2.2.2, 192.0.2.9"), None).is_err());
    }
}
