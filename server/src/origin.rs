//! Which requests this server answers, and which pages may drive it.
//!
//! - **Host** (every request): the name the client used must be one of this server's:
//!   `localhost` (and `*.localhost`), a loopback address or the listening address, with the
//!   listening port; any IP address when listening on all interfaces (an address cannot be
//!   rebound); and the host of `--public-url`. Anything else is refused with 421: a page
//!   on `evil.example` whose DNS answer flips to 127.0.0.1 (DNS rebinding) sends
//!   `Host: evil.example`. A request without `Host` (not a browser) is answered.
//! - **Origin** (state-changing requests): when a browser says which page sent the request,
//!   it must be this server (the origin of the `Host` it used, or `--public-url`) or one of
//!   `--allowed-origins`; otherwise 403.
//! - **Content type** (state-changing requests): `application/json`, which browsers only
//!   send cross-site after asking (CORS preflight, which this server never grants); a
//!   `text/plain` or form post is refused with 415.
//!
//! Hand-written: these are a few string comparisons on parsed `http` types; the
//! tower-http CORS layer answers which *responses* a browser may read, not which requests
//! may run, and there is no maintained Host-allow-list middleware for axum.

use std::net::{IpAddr, SocketAddr};

use axum::http::uri::{Authority, Scheme};
use axum::http::{header, HeaderMap, Uri};

use crate::error::ApiError;

/// The names and origins this server answers to.
#[derive(Clone, Debug)]
pub struct Origins {
    ip: IpAddr,
    /// 0: not known yet (a router driven without a socket): any port.
    port: u16,
    /// `--public-url`: (scheme, host, port).
    public: Option<(String, String, u16)>,
    /// `--allowed-origins`, normalised.
    allowed: Vec<String>,
}

impl Origins {
    /// `public_url`: the URL people use (behind a proxy); `allowed`: other origins whose
    /// pages may start work, space- or comma-separated. Bad values are refused at start-up.
    pub fn new(
        addr: SocketAddr,
        public_url: Option<&str>,
        allowed: &str,
    ) -> Result<Origins, String> {
        let public = public_url
            .filter(|u| !u.trim().is_empty())
            .map(|u| {
                parse_origin(u.trim().trim_end_matches('/')).ok_or_else(|| {
                    format!("public URL `{u}` is not a URL like https://gradless.example.com")
                })
            })
            .transpose()?;
        let mut list = vec![];
        for o in allowed
            .split([' ', ','])
            .map(str::trim)
            .filter(|o| !o.is_empty())
        {
            let (scheme, host, port) = parse_origin(o.trim_end_matches('/')).ok_or_else(|| {
                format!("allowed origin `{o}` is not an origin like https://docs.example.com")
            })?;
            list.push(origin_string(&scheme, &host, port));
        }
        Ok(Origins {
            ip: addr.ip(),
            port: addr.port(),
            public,
            allowed: list,
        })
    }

    /// Loopback on any port, nothing else (tests driving the router without a socket).
    pub fn local() -> Origins {
        Origins::new(SocketAddr::from(([127, 0, 0, 1], 0)), None, "").expect("valid")
    }

    /// The same, for the port the server actually listens on (known after binding).
    pub fn with_port(mut self, port: u16) -> Origins {
        self.port = port;
        self
    }

    /// Whether a request's `Host` (or HTTP/2 `:authority`) names this server.
    pub fn host_allowed(&self, host: &str) -> bool {
        let Ok(authority) = host.parse::<Authority>() else {
            return false;
        };
        let name = authority.host().trim_end_matches('.').to_ascii_lowercase();
        let port = authority.port_u16();
        if let Some((scheme, public_host, public_port)) = &self.public {
            if &name == public_host && port.unwrap_or(default_port(scheme)) == *public_port {
                return true;
            }
        }
        let port_ok = self.port == 0 || port.unwrap_or(80) == self.port;
        if name == "localhost" || name.ends_with(".localhost") {
            return port_ok;
        }
        match name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            Ok(ip) => port_ok && (ip.is_loopback() || ip == self.ip || self.ip.is_unspecified()),
            Err(_) => false,
        }
    }

    /// Whether a page of `origin` may start work, given the `Host` the request was sent to.
    pub fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let Some((scheme, name, port)) = parse_origin(origin) else {
            return false; // includes "null" (sandboxed frames, file: pages)
        };
        let origin = origin_string(&scheme, &name, port);
        if self.allowed.contains(&origin) {
            return true;
        }
        if let Some((s, h, p)) = &self.public {
            if origin == origin_string(s, h, *p) {
                return true;
            }
        }
        // Same origin as the page this server served: the Host the browser used.
        host.filter(|h| self.host_allowed(h))
            .and_then(|h| parse_origin(&format!("{scheme}://{h}")))
            .is_some_and(|(s, h, p)| origin == origin_string(&s, &h, p))
    }

    /// The checks for a state-changing request: Origin (403), then content type (415).
    pub fn check_drive(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("an unreadable origin");
            if !self.origin_allowed(origin, request_host(uri, headers)) {
                return Err(ApiError::ForeignOrigin(origin.chars().take(200).collect()));
            }
        }
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(ApiError::UnsupportedMediaType);
        }
        Ok(())
    }

    /// The origin of absolute links to this server (link previews, oEmbed): `--public-url`'s,
    /// else the one the request was sent to (`http://` and its `Host`, when it is one of
    /// ours), else the listening address.
    pub fn public_origin(&self, uri: &Uri, headers: &HeaderMap) -> String {
        if let Some((scheme, host, port)) = &self.public {
            return origin_string(scheme, host, *port);
        }
        match request_host(uri, headers).filter(|h| self.host_allowed(h)) {
            Some(host) => format!("http://{}", host.to_ascii_lowercase()),
            None => format!("http://{}", SocketAddr::new(self.ip, self.port)),
        }
    }

    /// The path and query of `url` when it is an address of this server (an `http(s)` URL
    /// whose host is one of its names), for oEmbed.
    pub fn own_path(&self, url: &str) -> Option<(String, String)> {
        let uri: Uri = url.trim().parse().ok()?;
        let scheme = uri.scheme()?;
        if *scheme != Scheme::HTTP && *scheme != Scheme::HTTPS {
            return None;
        }
        let authority = uri.authority()?;
        if authority.as_str().contains('@') {
            return None;
        }
        let host_ok = self.host_allowed(authority.as_str())
            || self.public.as_ref().is_some_and(|(s, h, p)| {
                authority.host().eq_ignore_ascii_case(h)
                    && authority.port_u16().unwrap_or(default_port(s)) == *p
            });
        host_ok.then(|| {
            (
                uri.path().to_string(),
                uri.query().unwrap_or("").to_string(),
            )
        })
    }

    /// The check for every request: a `Host` this server answers to.
    pub fn check_host(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
        match request_host(uri, headers) {
            Some(host) if !self.host_allowed(host) => {
                Err(ApiError::MisdirectedHost(host.chars().take(200).collect()))
            }
            _ => Ok(()),
        }
    }
}

/// The host a request was sent to: `Host`, or the URI's authority (HTTP/2).
fn request_host<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> Option<&'a str> {
    headers
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{fffd}"))
        .or_else(|| uri.authority().map(Authority::as_str))
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" {
        443
    } else {
        80
    }
}

/// `scheme://host[:port]` (nothing else: no path, no user) as (scheme, host, port).
fn parse_origin(text: &str) -> Option<(String, String, u16)> {
    let uri: Uri = text.parse().ok()?;
    let scheme = uri.scheme()?;
    if *scheme != Scheme::HTTP && *scheme != Scheme::HTTPS {
        return None;
    }
    let authority = uri.authority()?;
    if authority.as_str().contains('@') || !matches!(uri.path(), "" | "/") || uri.query().is_some()
    {
        return None;
    }
    let scheme = scheme.as_str().to_ascii_lowercase();
    let host = authority.host().trim_end_matches('.').to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    let port = authority.port_u16().unwrap_or(default_port(&scheme));
    Some((scheme, host, port))
}

fn origin_string(scheme: &str, host: &str, port: u16) -> String {
    if port == default_port(scheme) {
        format!("{scheme}://{host}")
    } else {
        format!("{scheme}://{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_this_servers_names_only() {
        let o = Origins::new(
            "127.0.0.1:3000".parse().unwrap(),
            Some("https://lab.example.com"),
            "",
        )
        .unwrap();
        for ok in [
            "localhost:3000",
            "127.0.0.1:3000",
            "[::1]:3000",
            "LOCALHOST:3000",
            "lab.example.com",
        ] {
            assert!(o.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example:3000",
            "localhost:3001",
            "10.0.0.5:3000",
            "lab.example.com:8080",
            "",
            "a b",
        ] {
            assert!(!o.host_allowed(bad), "{bad}");
        }
        let any = Origins::new("0.0.0.0:3000".parse().unwrap(), None, "").unwrap();
        assert!(any.host_allowed("10.0.0.5:3000") && !any.host_allowed("gradless.lan:3000"));
    }

    #[test]
    fn absolute_links_use_the_public_url_or_the_host_asked() {
        let uri: Uri = "/runs/x".parse().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "localhost:3000".parse().unwrap());
        let local = Origins::new("127.0.0.1:3000".parse().unwrap(), None, "").unwrap();
        assert_eq!(local.public_origin(&uri, &headers), "http://localhost:3000");
        headers.insert(header::HOST, "evil.example".parse().unwrap());
        assert_eq!(local.public_origin(&uri, &headers), "http://127.0.0.1:3000");
        let public = Origins::new("127.0.0.1:3000".parse().unwrap(), Some("https://lab.example.com/"), "").unwrap();
        assert_eq!(public.public_origin(&uri, &headers), "https://lab.example.com");
        assert_eq!(
            public.own_path("https://lab.example.com/runs/0123456789abcdef?x=1"),
            Some(("/runs/0123456789abcdef".into(), "x=1".into()))
        );
        assert_eq!(local.own_path("http://localhost:3000/compare?runs=a,b").map(|p| p.1), Some("runs=a,b".into()));
        for bad in ["https://evil.example/runs/x", "ftp://localhost:3000/runs/x", "http://u@localhost:3000/", "runs/x", ""] {
            assert_eq!(public.own_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn origins_are_this_server_or_allowed_ones() {
        let o = Origins::new(
            "127.0.0.1:3000".parse().unwrap(),
            None,
            "https://docs.example.com",
        )
        .unwrap();
        let host = Some("localhost:3000");
        assert!(o.origin_allowed("http://localhost:3000", host));
        assert!(o.origin_allowed("https://docs.example.com", host));
        assert!(o.origin_allowed("https://docs.example.com:443", host));
        for bad in [
            "http://evil.example",
            "null",
            "http://localhost:3001",
            "https://docs.example.com.evil",
        ] {
            assert!(!o.origin_allowed(bad, host), "{bad}");
        }
        assert!(!o.origin_allowed("http://evil.example:3000", Some("evil.example:3000")));
        assert!(Origins::new("127.0.0.1:1".parse().unwrap(), None, "docs.example.com").is_err());
    }
}
