//! Forwarding to the upstream: the request as the client sent it (or with its body pruned),
//! every header passed through, and the answer streamed back as it arrives.
//!
//! Each API's requests go to its own upstream when one is set (`proxy.upstreams.<api>` in
//! dcp.jsonc), else to the default one (`--upstream`, else `proxy.upstream`); the request's
//! path is kept, after the upstream's own path. An upstream is `http://` or `https://`: TLS is
//! rustls, trusting Mozilla's roots, the system's (or `SSL_CERT_FILE`'s) and the CA file
//! `proxy.upstreamCa` names. Only `Host` is set to the upstream's (a server routes by it) and,
//! when the body was pruned, `Content-Length` to the new body's. The answer's status, headers
//! and body bytes reach the client as the upstream sent them; a request the upstream did not
//! answer is a `502` whose body names the upstream and says what happened, in words
//! ([`unanswered`]). An upstream URL holds no secret: one with a user name or password, or a
//! query, is refused at start, and the error shows it with those parts masked.

use std::path::Path;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::convert::Api;

/// A body of either side, boxed.
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An upstream: `http` or `https`, a host and port, and an optional path prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    scheme: hyper::http::uri::Scheme,
    authority: hyper::http::uri::Authority,
    prefix: String,
}

impl Upstream {
    /// Parses an upstream URL; `what` names where it was given (`--upstream`, a config key).
    /// A user name or password in it, or a query, is refused: the proxy would print it, and
    /// sends no credential of its own (each client sends its key).
    pub fn parse(url: &str, what: &str) -> anyhow::Result<Upstream> {
        let shown = masked(url);
        let uri: Uri = url.parse().map_err(|e| anyhow::anyhow!("{what} {shown:?} is not a URL: {e}"))?;
        let scheme = match uri.scheme_str() {
            Some("http" | "https") => uri.scheme().cloned().unwrap_or(hyper::http::uri::Scheme::HTTP),
            _ => anyhow::bail!("{what} {shown:?} must start with http:// or https://"),
        };
        let authority = uri.authority().cloned().ok_or_else(|| anyhow::anyhow!("{what} {shown:?} has no host"))?;
        if authority.as_str().contains('@') {
            anyhow::bail!(
                "{what} {shown:?} has a user name or password in it: dcp proxy sends no credential of its own (each \
                 client sends its key) and would print the URL; give it without them"
            );
        }
        if uri.query().is_some() {
            anyhow::bail!(
                "{what} {shown:?} has a query: the client's own path and query are sent after the upstream's path; \
                 give it without one"
            );
        }
        let prefix = uri.path().trim_end_matches('/').to_string();
        Ok(Upstream { scheme, authority, prefix })
    }

    fn uri_for(&self, uri: &Uri) -> Result<Uri, hyper::http::Error> {
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        Ok(Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{path}", self.prefix))
            .build()?)
    }
}

/// `url` as an error may show it: a user name and password, and a query, masked (`***`).
pub fn masked(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..].find(['/', '?', '#']).map_or(url.len(), |i| start + i);
    let mut shown = match url[start..end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..start], &url[start + at..]),
        None => url.to_string(),
    };
    if let Some(query) = shown.find('?') {
        shown.replace_range(query + 1.., "***");
    }
    shown
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.prefix)
    }
}

/// Every upstream the proxy forwards to: the default one and each API's own.
#[derive(Debug, Clone)]
pub struct Upstreams {
    default: Option<Upstream>,
    anthropic: Option<Upstream>,
    chat: Option<Upstream>,
    responses: Option<Upstream>,
}

impl Upstreams {
    /// The upstreams of `--upstream` (`flag`) and dcp.jsonc's `proxy` section; at least one.
    pub fn new(flag: Option<&str>, config: &crate::config::Proxy) -> anyhow::Result<Upstreams> {
        let parse = |url: Option<&String>, what: &str| url.map(|u| Upstream::parse(u, what)).transpose();
        let default = match flag {
            Some(url) => Some(Upstream::parse(url, "--upstream")?),
            None => parse(config.upstream.as_ref(), "proxy.upstream")?,
        };
        let u = &config.upstreams;
        let upstreams = Upstreams {
            default,
            anthropic: parse(u.anthropic.as_ref(), "proxy.upstreams.anthropic")?,
            chat: parse(u.chat.as_ref(), "proxy.upstreams.chat")?,
            responses: parse(u.responses.as_ref(), "proxy.upstreams.responses")?,
        };
        if upstreams.all().next().is_none() {
            anyhow::bail!(
                "no upstream: give --upstream URL, or set proxy.upstream or proxy.upstreams.<anthropic|chat|responses> \
                 in dcp.jsonc"
            );
        }
        Ok(upstreams)
    }

    fn all(&self) -> impl Iterator<Item = &Upstream> {
        [&self.default, &self.anthropic, &self.chat, &self.responses].into_iter().flatten()
    }

    /// Where a request for `api` goes (`None`: a request for no API the proxy knows): the
    /// API's own upstream, else the default; else the only upstream there is.
    pub fn route(&self, api: Option<Api>) -> Option<&Upstream> {
        let own = match api {
            Some(Api::Anthropic) => self.anthropic.as_ref(),
            Some(Api::Chat) => self.chat.as_ref(),
            Some(Api::Responses) => self.responses.as_ref(),
            None => None,
        };
        own.or(self.default.as_ref()).or_else(|| {
            let first = self.all().next()?;
            self.all().all(|u| u == first).then_some(first)
        })
    }
}

impl std::fmt::Display for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let named = [
            ("", &self.default),
            ("anthropic ", &self.anthropic),
            ("chat ", &self.chat),
            ("responses ", &self.responses),
        ];
        let shown: Vec<String> =
            named.iter().filter_map(|(name, u)| u.as_ref().map(|u| format!("{name}{u}"))).collect();
        f.write_str(&shown.join(", "))
    }
}

/// The client that speaks to the upstreams, http or https, keeping connections alive.
pub type UpstreamClient = Client<HttpsConnector<HttpConnector>, Body>;

/// The upstream client, trusting the CA file `ca` besides the system's and Mozilla's roots.
pub fn client(ca: Option<&Path>) -> anyhow::Result<UpstreamClient> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(ca) = ca {
        use rustls::pki_types::pem::PemObject;
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(ca)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| anyhow::anyhow!("proxy.upstreamCa {}: not a PEM certificate file: {e}", ca.display()))?;
        if certs.is_empty() {
            anyhow::bail!("proxy.upstreamCa {}: holds no certificate", ca.display());
        }
        for cert in certs {
            roots.add(cert).map_err(|e| anyhow::anyhow!("proxy.upstreamCa {}: {e}", ca.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_send_buffer_size(super::listen::socket_buffer(super::listen::Buffer::Send).map(|size| size as usize));
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(https))
}

/// What goes upstream as the body: the client's own stream, its bytes, or the body a
/// layout gives: the client's bytes when it rewrites no item, else the pruned body in
/// pieces (those of the client's bytes not copied).
pub enum Outgoing {
    Stream(super::client_body::ClientBody),
    Bytes(Bytes),
    Laid(std::sync::Arc<super::conversation::Layout>),
}

pub fn boxed_bytes(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed_unsync()
}

/// How big a frame small pieces are joined into before they go upstream; a piece this big
/// goes as it is.
pub const JOINED: usize = 64 << 10;

/// Small pieces joined into frames of about [`JOINED`] bytes: a pruned body is the client's
/// bytes around every rewritten item, and a frame per piece would cost a write call for
/// every few of them. A big piece goes as it is, after the small ones queued before it.
#[derive(Debug, Default)]
pub struct Joiner(BytesMut);

/// The frames a piece put into a [`Joiner`] completes, in order: none, one or two.
pub type Ready = std::iter::Flatten<std::array::IntoIter<Option<Bytes>, 2>>;

impl Joiner {
    /// Queues `source[range]` and hands back the frames that completes. A small piece is
    /// copied from where it lies (no reference to `source` is taken for it); a big one is
    /// a slice of `source`, not copied.
    pub fn put(&mut self, source: &Bytes, range: std::ops::Range<usize>) -> Ready {
        if range.len() >= JOINED {
            return [self.flush(), Some(source.slice(range))].into_iter().flatten();
        }
        if self.0.is_empty() && self.0.capacity() < JOINED {
            // Room for a frame and the piece that fills it, so that it is never copied
            // again to grow.
            self.0.reserve(2 * JOINED);
        }
        self.0.extend_from_slice(&source[range]);
        let full = if self.0.len() >= JOINED { self.flush() } else { None };
        [full, None].into_iter().flatten()
    }

    /// The small pieces queued, as one frame, if there are any (the buffer keeps its room
    /// for the next).
    pub fn flush(&mut self) -> Option<Bytes> {
        if self.0.is_empty() {
            return None;
        }
        Some(self.0.split().freeze())
    }
}

/// `pieces` as the frames that go upstream, joined by a [`Joiner`]; empty ones are left out.
pub fn frames(pieces: Vec<Bytes>) -> std::collections::VecDeque<Bytes> {
    let mut joiner = Joiner::default();
    let mut out = std::collections::VecDeque::with_capacity(pieces.len());
    for piece in &pieces {
        out.extend(joiner.put(piece, 0..piece.len()));
    }
    out.extend(joiner.flush());
    out
}

/// A body of known pieces, sent in turn as frames, with its exact length.
struct Pieces(std::collections::VecDeque<Bytes>, u64);

impl hyper::body::Body for Pieces {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        let next = self.0.pop_front();
        if let Some(piece) = &next {
            self.1 -= piece.len() as u64;
        }
        std::task::Poll::Ready(next.map(|piece| Ok(hyper::body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.1)
    }
}

pub fn boxed_incoming(body: Incoming) -> Body {
    body.map_err(|e| Box::new(e) as BoxError).boxed_unsync()
}

/// Sends the request upstream and hands back its answer, streaming.
pub async fn forward(
    client: &UpstreamClient,
    upstream: &Upstream,
    parts: hyper::http::request::Parts,
    body: Outgoing,
) -> Response<Body> {
    let mut parts = parts;
    if let Err(failed) = aim(upstream, &mut parts) {
        return failed;
    }
    let body = match body {
        Outgoing::Laid(layout) => match layout.rewritten() {
            None => boxed_bytes(layout.head.body.clone()),
            Some(pieces) => {
                let length: usize = pieces.iter().map(Bytes::len).sum();
                parts.headers.remove(TRANSFER_ENCODING);
                parts.headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
                Pieces(frames(pieces), length as u64).boxed_unsync()
            }
        },
        Outgoing::Stream(incoming) => incoming.boxed_unsync(),
        Outgoing::Bytes(bytes) => boxed_bytes(bytes),
    };
    match client.request(Request::from_parts(parts, body)).await {
        Ok(answer) => answer.map(boxed_incoming),
        Err(e) => unanswered(upstream, &e),
    }
}

/// The answer for a request `upstream` did not answer (`e` says why), in words: logged with
/// the error's own chain, and a `502` that names the upstream and what happened; a `408`
/// when it was the client that stopped sending its body.
pub fn unanswered(upstream: &Upstream, e: &(dyn std::error::Error + 'static)) -> Response<Body> {
    let chain = crate::error_chain(e);
    if let Some(stalled) = find::<super::client_body::Stalled>(e) {
        let message = format!("dcp proxy: the request's body could not be read: {stalled}");
        return failure(StatusCode::REQUEST_TIMEOUT, &message);
    }
    let what = unanswered_because(e);
    tracing::warn!("the upstream {upstream} {what} ({chain})");
    failure(StatusCode::BAD_GATEWAY, &format!("dcp proxy: the upstream {upstream} {what}"))
}

/// What happened to a request its upstream did not answer, in words, after "the upstream".
fn unanswered_because(e: &(dyn std::error::Error + 'static)) -> String {
    let io = find::<std::io::Error>(e);
    let tls = find::<rustls::Error>(e);
    let connecting = find::<hyper_util::client::legacy::Error>(e).is_some_and(|e| e.is_connect());
    if connecting {
        use std::io::ErrorKind;
        let why = match (tls, io.map(std::io::Error::kind)) {
            (Some(rustls::Error::InvalidCertificate(c)), _) => format!(
                "its certificate is not trusted ({c:?}): set proxy.upstreamCa or SSL_CERT_FILE to the CA that signed it"
            ),
            (Some(tls), _) => format!("the TLS handshake failed ({tls})"),
            (None, Some(ErrorKind::ConnectionRefused)) => "nothing listens at that address (connection refused)".into(),
            (None, Some(ErrorKind::TimedOut)) => "connecting timed out".into(),
            _ if crate::error_chain(e).contains("dns error") => "its host name could not be resolved".into(),
            _ => crate::error_chain(e),
        };
        return format!("could not be reached: {why}");
    }
    let http = find::<hyper::Error>(e);
    match (http, io.map(std::io::Error::kind)) {
        (Some(h), _) if h.is_incomplete_message() => {
            "closed the connection after reading the request, without answering it".into()
        }
        (_, Some(std::io::ErrorKind::ConnectionReset)) => {
            "reset the connection after reading the request, without answering it".into()
        }
        (_, Some(std::io::ErrorKind::BrokenPipe)) => "closed the connection before it had read the request".into(),
        (Some(h), _) if h.is_parse() => "answered with something that is not HTTP/1.1".into(),
        _ => format!("failed: {}", crate::error_chain(e)),
    }
}

/// The first error of type `T` in `e`'s chain of causes, looking inside the I/O errors that
/// wrap another (whose `source` skips the one they wrap: a TLS error comes wrapped twice).
fn find<'e, T: std::error::Error + 'static>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e T> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        let wrapped = e.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref);
        next = match wrapped {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// Points the request at `upstream`: its URI, and `Host`; or the answer that says why not.
pub fn aim(upstream: &Upstream, parts: &mut hyper::http::request::Parts) -> Result<(), Response<Body>> {
    let uri = match upstream.uri_for(&parts.uri) {
        Ok(uri) => uri,
        Err(e) => return Err(failure(StatusCode::BAD_REQUEST, &format!("dcp proxy: bad request path: {e}"))),
    };
    parts.uri = uri;
    if let Ok(host) = HeaderValue::from_str(upstream.authority.as_str()) {
        parts.headers.insert(HOST, host);
    }
    Ok(())
}

/// An answer the proxy makes itself, in the shape both APIs use for errors.
pub fn failure(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "type": "error", "error": { "type": "proxy_error", "message": message } });
    let mut answer = Response::new(boxed_bytes(Bytes::from(body.to_string())));
    *answer.status_mut() = status;
    answer.headers_mut().insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_pieces_go_upstream_joined_into_few_frames_with_the_same_bytes_and_big_ones_as_they_are() {
        let big = Bytes::from(vec![b'b'; JOINED + 1]);
        let mut pieces: Vec<Bytes> = (0..3000).map(|i| Bytes::from(format!("{i},"))).collect();
        pieces.insert(1000, Bytes::new());
        pieces.insert(2000, big.clone());
        let want = pieces.concat();
        let frames = frames(pieces);
        assert_eq!(frames.iter().flat_map(|f| f.iter().copied()).collect::<Vec<u8>>(), want);
        assert_eq!(frames.len(), 3, "the small pieces before the big one, the big one, those after it");
        assert_eq!(frames[1].as_ptr(), big.as_ptr(), "a big piece is not copied");
        assert!(frames.iter().all(|f| !f.is_empty()));
    }

    #[test]
    fn an_upstream_url_is_shown_with_its_user_password_and_query_masked() {
        let cases = [
            ("http://user:pw@host:8080/v1", "http://***@host:8080/v1"),
            ("https://tok@host", "https://***@host"),
            ("http://host/x?key=pw&a=b", "http://host/x?***"),
            ("u:pw@host:1", "***@host:1"),
            ("http://a@b@host/p@q", "http://***@host/p@q"),
            ("https://api.example/v1", "https://api.example/v1"),
        ];
        for (url, shown) in cases {
            assert_eq!(masked(url), shown, "{url}");
        }
    }
}
