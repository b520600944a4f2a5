//! Forwarding to the upstream: the request as the client sent it (or with its body pruned),
//! every header passed through, and the answer streamed back as it arrives.
//!
//! Only `Host` is set to the upstream's (a server routes by it) and, when the body was
//! pruned, `Content-Length` to the new body's. The answer's status, headers and body bytes
//! reach the client as the upstream sent them; an upstream that cannot be reached is a `502`
//! whose body names it.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// A body of either side, boxed.
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The upstream every request goes to: an `http://host:port` and an optional path prefix.
#[derive(Debug, Clone)]
pub struct Upstream {
    authority: hyper::http::uri::Authority,
    prefix: String,
}

impl Upstream {
    /// Parses `--upstream`. Only plain HTTP is spoken to the upstream.
    pub fn parse(url: &str) -> anyhow::Result<Upstream> {
        let uri: Uri = url.parse().map_err(|e| anyhow::anyhow!("--upstream {url:?} is not a URL: {e}"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => anyhow::bail!(
                "--upstream {url:?}: this build speaks plain HTTP to the upstream only; use an http:// URL \
                 (a local gateway that speaks TLS onwards)"
            ),
            _ => anyhow::bail!("--upstream {url:?} must start with http://"),
        }
        let authority = uri.authority().cloned().ok_or_else(|| anyhow::anyhow!("--upstream {url:?} has no host"))?;
        let prefix = uri.path().trim_end_matches('/').to_string();
        Ok(Upstream { authority, prefix })
    }

    fn uri_for(&self, uri: &Uri) -> Result<Uri, hyper::http::Error> {
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        Ok(Uri::builder()
            .scheme("http")
            .authority(self.authority.clone())
            .path_and_query(format!("{}{path}", self.prefix))
            .build()?)
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.authority, self.prefix)
    }
}

/// The client that speaks to the upstream, keeping connections alive.
pub type UpstreamClient = Client<HttpConnector, Body>;

pub fn client() -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

/// What goes upstream as the body: the client's own stream, or the pruned bytes.
pub enum Outgoing {
    Stream(Incoming),
    Bytes(Bytes, Changed),
}

/// Whether a buffered body is the one the client sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    No,
    Yes,
}

pub fn boxed_bytes(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed_unsync()
}

fn boxed_incoming(body: Incoming) -> Body {
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
    let uri = match upstream.uri_for(&parts.uri) {
        Ok(uri) => uri,
        Err(e) => return failure(StatusCode::BAD_REQUEST, &format!("dcp proxy: bad request path: {e}")),
    };
    parts.uri = uri;
    if let Ok(host) = HeaderValue::from_str(upstream.authority.as_str()) {
        parts.headers.insert(HOST, host);
    }
    let body = match body {
        Outgoing::Stream(incoming) => boxed_incoming(incoming),
        Outgoing::Bytes(bytes, changed) => {
            if changed == Changed::Yes {
                parts.headers.remove(TRANSFER_ENCODING);
                parts.headers.insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
            }
            boxed_bytes(bytes)
        }
    };
    match client.request(Request::from_parts(parts, body)).await {
        Ok(answer) => answer.map(boxed_incoming),
        Err(e) => {
            tracing::warn!("upstream {upstream} failed: {}", crate::error_chain(&e));
            failure(StatusCode::BAD_GATEWAY, &format!("dcp proxy: the upstream {upstream} could not be reached"))
        }
    }
}

/// An answer the proxy makes itself, in the shape both APIs use for errors.
pub fn failure(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "type": "error", "error": { "type": "proxy_error", "message": message } });
    let mut answer = Response::new(boxed_bytes(Bytes::from(body.to_string())));
    *answer.status_mut() = status;
    answer.headers_mut().insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    answer
}
