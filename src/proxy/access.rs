//! Who may use the proxy: any program on this machine when it listens on a loopback address
//! (the default), and only a client that sends the proxy's token when `--allow-remote` lets
//! it listen where other machines reach it.
//!
//! A proxy that other machines reach hands anyone who reaches it the user's upstream (a
//! gateway that trusts the user's network, say) and lets them write conversation state
//! under any id. So a non-loopback `--listen` is refused unless `--allow-remote` names the
//! risk, and then every request must carry the token: in the `X-Dcp-Token` header, or as
//! the first segment of its path after `/t/` (`http://HOST:8788/t/TOKEN/v1`, for a client
//! that can set only a base URL). The token is taken out of the request before it goes
//! upstream, compared in constant time, and neither logged nor stored: it is given in
//! `DCP_PROXY_TOKEN`, or made from the system's random source and printed once at start.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::http::request::Parts;
use hyper::Uri;

/// The header a client sends the token in.
pub const TOKEN_HEADER: &str = "x-dcp-token";
/// The path prefix a client's base URL carries the token after: `/t/TOKEN`.
pub const TOKEN_PATH: &str = "/t/";
/// The environment variable that gives the token.
pub const TOKEN_ENV: &str = "DCP_PROXY_TOKEN";
/// The fewest characters a given token may have.
const SHORTEST: usize = 16;

/// Whether the user let the proxy listen where other machines reach it (`--allow-remote`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Local,
    Remote,
}

/// Who the proxy serves.
#[derive(Debug)]
pub enum Access {
    /// Every program that reaches it (it listens on loopback only).
    Local,
    /// Only a client that sends the token; the requests refused are told in the log.
    Token(Token, Refused),
}

/// The requests refused for want of the token: told in the log at most once a minute, with
/// how many there were since, so that a client knocking in a loop does not fill it.
#[derive(Debug, Default)]
pub struct Refused {
    told: Mutex<Option<Instant>>,
    since: AtomicU64,
}

impl Refused {
    fn count(&self) {
        let count = self.since.fetch_add(1, Ordering::Relaxed) + 1;
        let mut told = self.told.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if told.is_some_and(|at| at.elapsed() < Duration::from_secs(60)) {
            return;
        }
        *told = Some(Instant::now());
        self.since.store(0, Ordering::Relaxed);
        tracing::warn!("refused {count} request(s) that did not carry the proxy's token (told at most once a minute)");
    }
}

/// The token a client must send: only characters safe in a URL path and a header, at least
/// [`SHORTEST`] of them.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

/// Whether a character may be in a token: those a URL path and a header carry as they are.
fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~')
}

impl Token {
    /// A new token: 32 bytes of the system's random source, in hex.
    pub fn generate() -> anyhow::Result<Token> {
        use ring::rand::SecureRandom;
        let mut bytes = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| anyhow::anyhow!("the system's random source could not make a token: set {TOKEN_ENV}"))?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// The token the user gave in [`TOKEN_ENV`]; an error says what is wrong with it, never
    /// quoting it.
    pub fn given(value: &str) -> anyhow::Result<Token> {
        if value.chars().count() < SHORTEST {
            anyhow::bail!("{TOKEN_ENV} is too short: a token has at least {SHORTEST} characters");
        }
        if !value.chars().all(token_char) {
            anyhow::bail!(
                "{TOKEN_ENV} may hold only letters, digits and - _ . ~ (it is sent in a URL path or a header)"
            );
        }
        Ok(Token(value.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is the token, compared in time that does not depend on where they
    /// differ.
    fn matches(&self, candidate: &[u8]) -> bool {
        let own = self.0.as_bytes();
        if own.len() != candidate.len() {
            return false;
        }
        let differ = own.iter().zip(candidate).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(differ) == 0
    }
}

/// Whether `addr` is this machine's alone: 127.0.0.0/8 or `::1` (an IPv4-mapped loopback too).
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().to_canonical().is_loopback()
}

/// Who the proxy listening on `listen` serves: everyone on loopback; else, with
/// `--allow-remote`, those who send the token `given` (from [`TOKEN_ENV`]) or a new one.
/// Returns the token to print when it was made here; an error when `listen` is not loopback
/// and the user did not allow it.
pub fn access(listen: SocketAddr, reach: Reach, given: Option<&str>) -> anyhow::Result<(Access, Option<Token>)> {
    if reach == Reach::Local {
        if !is_loopback(&listen) {
            anyhow::bail!(
                "refusing to listen on {listen}: other machines can reach that address, and anyone who reaches the \
                 proxy could send requests to your upstream through it and write conversation state. Listen on \
                 127.0.0.1 (the default), or pass --allow-remote: every client must then send the proxy's token"
            );
        }
        return Ok((Access::Local, None));
    }
    match given {
        Some(value) => Ok((Access::Token(Token::given(value)?, Refused::default()), None)),
        None => {
            let token = Token::generate()?;
            Ok((Access::Token(token.clone(), Refused::default()), Some(token)))
        }
    }
}

/// Whether a request may be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    Yes,
    No,
}

impl Access {
    /// Takes the token out of the request (its header, and its path's `/t/TOKEN` prefix),
    /// so that it never goes upstream, and says whether the request carried the right one.
    pub fn admit(&self, parts: &mut Parts) -> Admitted {
        let Access::Token(token, refused) = self else { return Admitted::Yes };
        let mut admitted = Admitted::No;
        if let Some(sent) = parts.headers.remove(TOKEN_HEADER) {
            if token.matches(sent.as_bytes()) {
                admitted = Admitted::Yes;
            }
        }
        if let Some((sent, rest)) = path_token(&parts.uri) {
            if token.matches(sent.as_bytes()) {
                admitted = Admitted::Yes;
            }
            if let Ok(uri) = rest.parse::<Uri>() {
                parts.uri = uri;
            }
        }
        if admitted == Admitted::No {
            refused.count();
        }
        admitted
    }
}

/// The token a path carries after [`TOKEN_PATH`], and the path and query without it.
fn path_token(uri: &Uri) -> Option<(String, String)> {
    let path = uri.path().strip_prefix(TOKEN_PATH)?;
    let (token, rest) = path.split_once('/').map_or((path, ""), |(t, r)| (t, r));
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    Some((token.to_string(), format!("/{rest}{query}")))
}

/// What a client that sent no token, or a wrong one, is told.
pub fn refusal() -> String {
    format!(
        "dcp proxy: this proxy serves only clients that send its token: in the {TOKEN_HEADER} header, or in the \
         base URL as http://HOST:PORT{TOKEN_PATH}TOKEN"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str, header: Option<&str>) -> Parts {
        let mut request = hyper::Request::post(uri);
        if let Some(h) = header {
            request = request.header(TOKEN_HEADER, h);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn token() -> Access {
        Access::Token(Token::given("0123456789abcdef-token").unwrap(), Refused::default())
    }

    #[test]
    fn a_loopback_address_is_served_as_it_is_and_any_other_only_with_allow_remote() {
        for local in ["127.0.0.1:1", "127.3.2.1:1", "[::1]:1", "[::ffff:127.0.0.1]:1"] {
            let (access, _) = access(local.parse().unwrap(), Reach::Local, None).unwrap();
            assert!(matches!(access, Access::Local), "{local}");
        }
        for remote in ["0.0.0.0:1", "[::]:1", "192.168.1.20:1", "[::ffff:10.0.0.1]:1"] {
            let err = access(remote.parse().unwrap(), Reach::Local, None).unwrap_err().to_string();
            assert!(err.contains("refusing to listen") && err.contains("--allow-remote"), "{err}");
            let (allowed, printed) = access(remote.parse().unwrap(), Reach::Remote, None).unwrap();
            assert!(matches!(allowed, Access::Token(..)) && printed.is_some(), "{remote}");
        }
    }

    #[test]
    fn a_request_is_admitted_with_the_token_in_its_header_or_path_which_it_then_no_longer_carries() {
        let access = token();
        let mut by_header = parts("/v1/messages", Some("0123456789abcdef-token"));
        assert_eq!(access.admit(&mut by_header), Admitted::Yes);
        assert!(by_header.headers.get(TOKEN_HEADER).is_none());
        let mut by_path = parts("/t/0123456789abcdef-token/v1/responses?x=1", None);
        assert_eq!(access.admit(&mut by_path), Admitted::Yes);
        assert_eq!(by_path.uri, "/v1/responses?x=1");
        for (uri, header) in [
            ("/v1/messages", None),
            ("/v1/messages", Some("0123456789abcdef-tokeN")),
            ("/t/0123456789abcdef-toke/v1/messages", None),
            ("/t//v1/messages", None),
        ] {
            let mut wrong = parts(uri, header);
            assert_eq!(access.admit(&mut wrong), Admitted::No, "{uri} {header:?}");
            assert!(wrong.headers.get(TOKEN_HEADER).is_none() && !wrong.uri.path().starts_with(TOKEN_PATH));
        }
        assert_eq!(Access::Local.admit(&mut parts("/v1/messages", None)), Admitted::Yes);
    }

    #[test]
    fn a_given_token_too_short_or_with_characters_a_url_would_change_is_refused_without_quoting_it() {
        for bad in ["abc12", "0123456789abcdef/x", "0123456789abcdef token"] {
            let err = Token::given(bad).unwrap_err().to_string();
            assert!(err.contains(TOKEN_ENV) && !err.contains(bad), "{err}");
        }
        let made = Token::generate().unwrap();
        assert_eq!(made.as_str().len(), 64);
        assert_ne!(made.as_str(), Token::generate().unwrap().as_str());
        assert_eq!(format!("{made:?}"), "Token(…)");
    }
}
