//! `dcp proxy`: a local HTTP gateway that prunes what any client sends to its model.
//!
//! Claude Code, Codex, OpenCode 2 and any other client that lets its user set the API's base
//! URL reach dcp here instead of through the OpenCode plugin. A request to one of the APIs
//! the proxy knows ([`convert::Api`]: Anthropic Messages, OpenAI Chat Completions and
//! Responses) is mapped onto the session model, run through the same engine as `dcp serve`
//! ([`engine`]: strategies, cache-aware policy, state files under the conversation's id from
//! [`identity`]), and the edits are written back into the request, which is forwarded to the
//! upstream ([`forward`]); anything else is forwarded as it came. The answer streams back as
//! the upstream sends it. Whatever goes wrong on dcp's side (a body that is too big, not JSON
//! or compressed, an engine error or timeout) sends the client's own bytes on unchanged, with
//! one warning that names the reason and never the content; no header, key or message text is
//! logged or stored. Who may connect, and how much one connection may hold, are
//! [`access`]'s and [`listen`]'s: loopback unless `--allow-remote` (and then a token), a cap
//! on connections, read timeouts. A request counts in the session's figures only once the
//! upstream answered it: the engine's [`Ticket`] is settled with the answer's status.

pub mod access;
pub mod buffers;
pub mod client_body;
pub mod conversation;
pub mod convert;
mod engine;
pub mod forward;
pub mod identity;
pub mod listen;
mod pipeline;
pub mod priced;
pub mod raw;
mod rest;
pub mod restore;
pub mod usage;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::http::request::Parts;
use hyper::{Method, Request, Response};

use self::access::{Access, Admitted};
use self::client_body::ClientBody;
use self::convert::Api;
pub use self::engine::{Edits, Engine, Ticket};
use self::forward::{Body, Outgoing, Upstream, UpstreamClient, Upstreams};
use self::listen::Limits;
pub use self::listen::{socket_buffer, Buffer, SOCKET_BUFFER};
use crate::config::{self};
use crate::sidecar::Server;
use crate::state::saver::Saver;

/// Bodies over this size are sent on as they came, unread by the engine.
pub const MAX_BODY: usize = 64 << 20;
pub use self::buffers::KEPT_MAX;
/// How long a request waits for the engine before it is sent on unpruned.
pub const ENGINE_TIMEOUT: Duration = Duration::from_secs(5);

/// What `dcp proxy` is told.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    pub listen: SocketAddr,
    /// `--allow-remote`: whether an address other machines reach may be listened on.
    pub reach: access::Reach,
    /// `--max-connections`, when given.
    pub connections: Option<usize>,
    /// `--read-timeout`.
    pub read_timeout: Duration,
    /// `--upstream`: every API's upstream unless dcp.jsonc names one for it.
    pub upstream: Option<String>,
    /// Where the state and the config are, as for `dcp serve`.
    pub sidecar: crate::sidecar::ServeOptions,
}

/// What every connection shares.
pub struct Shared {
    pub engine: Engine,
    pub conversations: conversation::Conversations,
    pub upstreams: Upstreams,
    pub client: UpstreamClient,
    /// Who may use the proxy.
    pub access: Access,
    /// The key `dcp restore` must give ([`restore`]); empty: restores are refused.
    pub restore_key: String,
}

/// The engine's server: `dcp serve`'s, with the agent tools off. A proxied client cannot
/// run dcp's `discard`, `extract`, `compress` or `restore`, so it is offered neither them nor
/// their list; what dcp hid, its agent restores with `dcp restore N` in its shell.
pub fn server(options: &crate::sidecar::ServeOptions, saver: Option<Saver>) -> anyhow::Result<Server> {
    server_with(options, load_config(options)?, saver)
}

/// The config `dcp serve` would read (its warnings logged).
fn load_config(options: &crate::sidecar::ServeOptions) -> anyhow::Result<config::Config> {
    let locations = config::Locations::standard(&options.env, options.project.as_deref());
    let loaded = config::load(&locations)?;
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    Ok(loaded.config)
}

fn server_with(
    options: &crate::sidecar::ServeOptions,
    config: config::Config,
    saver: Option<Saver>,
) -> anyhow::Result<Server> {
    let mut config = config;
    config.tools.discard.enabled = false;
    config.tools.extract.enabled = false;
    config.tools.compress.enabled = false;
    // No `restore` tool either: the placeholders say to run `dcp restore N` (see `restore`).
    let shell = std::mem::replace(&mut config.tools.restore.enabled, false);
    let mut server = Server::with_config(options.clone(), config, saver)?;
    if shell {
        server.set_restore(crate::texts::restore::Via::Shell);
    }
    Ok(server)
}

/// Runs the proxy until it is interrupted (Ctrl-C or SIGTERM); then saves every state.
pub fn run(options: ProxyOptions) -> anyhow::Result<()> {
    let given = std::env::var(access::TOKEN_ENV).ok();
    let (access, made) = access::access(options.listen, options.reach, given.as_deref())?;
    let config = load_config(&options.sidecar)?;
    let upstreams = Upstreams::new(options.upstream.as_deref(), &config.proxy)?;
    let client = forward::client(config.proxy.upstream_ca.as_deref().map(std::path::Path::new))?;
    let limits = limits(&options);
    crate::tokens::preload();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async move {
        let listener = listen(options.listen).map_err(|e| listen::listen_error(options.listen, &e))?;
        let interrupted = interrupts();
        let saver = Saver::spawn();
        let engine = Engine::start(server_with(&options.sidecar, config, Some(saver.clone()))?);
        let url = format!("http://{}", listener.local_addr()?);
        let published = restore::PublishedKey::publish(&url, restore::access_file(&options.sidecar.env.cache_dir()));
        let shared = Arc::new(Shared {
            engine: engine.clone(),
            conversations: conversation::Conversations::default()
                .remembering(crate::host::paths::state_dir(&options.sidecar.data_dir)),
            upstreams,
            client,
            access,
            restore_key: published.key.clone(),
        });
        println!("dcp proxy: listening on {url}, forwarding to {}", shared.upstreams);
        if let Access::Token(..) = shared.access {
            println!("{}", token_line(made.as_ref()));
        }
        tokio::select! {
            result = serve(&listener, &shared, limits) => result?,
            () = interrupted => {}
        }
        drop(shared);
        tokio::task::spawn_blocking(move || engine.stop()).await?;
        saver.flush().await;
        drop(published);
        Ok(())
    })
}

/// The bounds `options` set: `--max-connections` (warned about when the open-file limit
/// cannot hold that many), else what that limit allows; `--read-timeout`.
fn limits(options: &ProxyOptions) -> Limits {
    let files = listen::open_file_limit();
    let fits = listen::default_connections(files);
    let connections = options.connections.unwrap_or(fits);
    if connections > fits {
        let limit = files.map(|n| format!(" (ulimit -n is {n})")).unwrap_or_default();
        tracing::warn!(
            "--max-connections {connections}: the open-file limit{limit} holds about {fits}; accepts past it fail \
             and are retried"
        );
    }
    Limits { connections, read_timeout: options.read_timeout }
}

/// What the user is told of the token clients must send: the token itself when it was made
/// here (printed this once), else where it came from.
fn token_line(made: Option<&access::Token>) -> String {
    let how =
        format!("in the {} header, or in the base URL as http://HOST:PORT{}TOKEN", "X-Dcp-Token", access::TOKEN_PATH);
    match made {
        Some(token) => format!(
            "dcp proxy: other machines may connect; every client must send the token {} ({how}); set {} to keep \
             one across restarts",
            token.as_str(),
            access::TOKEN_ENV
        ),
        None => format!(
            "dcp proxy: other machines may connect; every client must send the token in {} ({how})",
            access::TOKEN_ENV
        ),
    }
}

/// The listening socket at `addr`, its connections' receive buffers [`socket_buffer`].
pub fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    if let Some(size) = socket_buffer(Buffer::Receive) {
        socket.set_recv_buffer_size(size)?;
    }
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Serves the proxy's connections on `listener`, within `limits`, until it fails.
pub async fn serve(listener: &tokio::net::TcpListener, shared: &Arc<Shared>, limits: Limits) -> anyhow::Result<()> {
    let shared = Arc::clone(shared);
    listen::accept_loop(listener, limits, move |req| handle(req, Arc::clone(&shared))).await
}

/// Ctrl-C and SIGTERM, listened for from the moment this is called, not from the first poll:
/// the proxy calls it before it says it listens, so a signal that comes while its first
/// request is served (before the main task polls anything) stops it as one that comes later,
/// saving every state, instead of killing it.
fn interrupts() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (term, int) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Serves one request: prunes it when it is one of the APIs', and forwards it.
pub async fn handle(req: Request<ClientBody>, shared: Arc<Shared>) -> Result<Response<Body>, Infallible> {
    let (mut parts, body) = req.into_parts();
    // A restore carries the key `dcp restore` read from the file the proxy published, which
    // only this user can read: that admits it, token or not.
    if restore::is_restore(&parts) {
        return Ok(restore::answer(&shared, &parts).await);
    }
    if shared.access.admit(&mut parts) == Admitted::No {
        return Ok(forward::failure(hyper::StatusCode::UNAUTHORIZED, &access::refusal()));
    }
    let api = if parts.method == Method::POST { Api::of_path(parts.uri.path()) } else { None };
    let Some(upstream) = shared.upstreams.route(api) else {
        let message = format!("dcp proxy: no upstream for {}: set --upstream or proxy.upstream", parts.uri.path());
        return Ok(forward::failure(hyper::StatusCode::BAD_GATEWAY, &message));
    };
    let Some(api) = api else {
        return Ok(forward::forward(&shared.client, upstream, parts, Outgoing::Stream(body)).await);
    };
    let declared = declared_length(&parts);
    if let Some(length) = declared.filter(|&n| n > MAX_BODY) {
        let what = format!("the body is {length} bytes, over the {MAX_BODY}-byte limit");
        tracing::warn!("{} {}: sent on unpruned, unread: {what}", parts.method, parts.uri.path());
        return Ok(forward::forward(&shared.client, upstream, parts, Outgoing::Stream(body)).await);
    }
    if declared.is_some() && shared.conversations.pipelining() == conversation::Pipelining::On {
        return Ok(pipeline::handle(&shared, api, upstream, parts, body).await);
    }
    let bytes = match collect(body).await {
        Ok(bytes) => bytes,
        Err(answer) => return Ok(answer),
    };
    let (outgoing, ticket) = Whole { shared: &shared, api, parts: &parts, bytes, checked: None }.outgoing().await;
    Ok(settled(ticket, forward::forward(&shared.client, upstream, parts, outgoing).await, api, upstream))
}

/// `answer`, the request's ticket settled by its status: the request counts only when the
/// upstream answered it; and what the answer says the upstream billed goes to its conversation
/// ([`usage`]).
fn settled(ticket: Option<Ticket>, answer: Response<Body>, api: Api, upstream: &Upstream) -> Response<Body> {
    let Some(ticket) = ticket else { return answer };
    let billing = ticket.billing();
    ticket.settle(answer.status());
    usage::record(answer, api, billing, upstream)
}

/// The body's length as the request's `Content-Length` declares it.
fn declared_length(parts: &Parts) -> Option<usize> {
    parts.headers.get(hyper::header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// A body of no declared length, read whole up to [`MAX_BODY`]; else the answer that says why
/// it was not.
async fn collect(mut body: ClientBody) -> Result<Bytes, Response<Body>> {
    let mut joined = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| unread(&e))?;
        if let Ok(data) = frame.into_data() {
            if joined.len() + data.len() > MAX_BODY {
                let message = format!("dcp proxy: the request's body is over the {MAX_BODY}-byte limit");
                return Err(forward::failure(hyper::StatusCode::PAYLOAD_TOO_LARGE, &message));
            }
            joined.extend_from_slice(&data);
        }
    }
    Ok(joined.freeze())
}

/// What a client whose body could not be read is told: that it stalled (`408`), or why else.
fn unread(e: &forward::BoxError) -> Response<Body> {
    let status = match e.downcast_ref::<client_body::Stalled>() {
        Some(_) => hyper::StatusCode::REQUEST_TIMEOUT,
        None => hyper::StatusCode::BAD_REQUEST,
    };
    forward::failure(status, &format!("dcp proxy: the request's body could not be read: {e}"))
}

/// A request whose whole body has arrived, as pruning reads it.
struct Whole<'a> {
    shared: &'a Shared,
    api: Api,
    parts: &'a Parts,
    bytes: Bytes,
    /// A kept body the caller has found the body to continue (every byte of its known part
    /// compared already), which is then not looked for again among the kept bodies.
    checked: Option<Arc<raw::Head>>,
}

/// The pruned body of a request (in pieces that share `bytes`' buffer), `None` when nothing
/// in it changes, or why it is not pruned; the request counted as answered.
pub async fn prune(shared: &Shared, api: Api, parts: &Parts, bytes: &Bytes) -> Result<Option<Vec<Bytes>>, String> {
    let pruned = Whole { shared, api, parts, bytes: bytes.clone(), checked: None }.prune().await?;
    if let Some(ticket) = pruned.ticket {
        ticket.settle(hyper::StatusCode::OK);
    }
    Ok(pruned.layout.and_then(|layout| layout.rewritten()))
}

/// What pruning a body gave: the layout it goes upstream under (the items the engine's
/// edits rewrite in it, none when nothing changes; `None` when the engine did not read it),
/// and the ticket that counts the request once its answer is known.
struct Pruned {
    layout: Option<Arc<conversation::Layout>>,
    ticket: Option<Ticket>,
}

impl Whole<'_> {
    /// What goes upstream: the pruned pieces, or the client's bytes (with a warning that
    /// names why, when the engine could not read them); and the request's ticket.
    async fn outgoing(self) -> (Outgoing, Option<Ticket>) {
        match self.prune().await {
            Ok(Pruned { layout: Some(layout), ticket }) => (Outgoing::Laid(layout), ticket),
            Ok(Pruned { layout: None, ticket }) => (Outgoing::Bytes(self.bytes), ticket),
            Err(reason) => {
                tracing::warn!("{} {}: sent on unpruned: {reason}", self.parts.method, self.parts.uri.path());
                (Outgoing::Bytes(self.bytes), None)
            }
        }
    }

    /// How the body goes upstream ([`Pruned`]), or why it is not pruned; not looking again
    /// for a kept body the caller has found this one to continue.
    async fn prune(&self) -> Result<Pruned, String> {
        let Whole { shared, api, parts, bytes, .. } = self;
        let (api, headers) = (*api, &parts.headers);
        let encoding = headers.get(hyper::header::CONTENT_ENCODING).and_then(|v| v.to_str().ok());
        if encoding.is_some_and(|e| !e.eq_ignore_ascii_case("identity")) {
            return Err("the body is compressed".into());
        }
        if bytes.len() > MAX_BODY {
            return Err(format!("the body is {} bytes, over the {MAX_BODY}-byte limit", bytes.len()));
        }
        let started = std::time::Instant::now();
        let head = shared.conversations.continued(api, bytes, self.checked.clone());
        let matched = started.elapsed();
        // `continued` compared the head's known part, or the caller did as the body arrived.
        let read_after = head.as_ref().and_then(|h| raw::Raw::read_past(api, bytes, h).map(|raw| (raw, h)));
        let (raw, read) = match read_after {
            Some((raw, head)) => (raw, conversation::Read::After(head)),
            None => match raw::Raw::read(api, bytes)? {
                Some(raw) => (raw, conversation::Read::Whole),
                None => return Ok(Pruned { layout: None, ticket: None }),
            },
        };
        let sid = shared.conversations.session_id(api, headers, bytes, &raw, head.as_ref());
        let parsed = started.elapsed();
        let slot = shared.conversations.slot(&sid);
        let mut held = slot.lock().await;
        let (mut builder, mut memory) = conversation::fold(api, &sid, bytes, &raw, &read, held.take());
        let base = builder.dirty_from();
        let (tail, sheet) = (builder.messages()[base..].to_vec(), Some(priced::sheet_of(api, bytes, &raw)));
        let was_mapped = started.elapsed();
        // On an error the conversation is not kept: its next request is mapped and sent whole.
        let too_big = bytes.len() > KEPT_MAX;
        let (edits, mut ticket) = match shared.engine.transform(sid.clone(), base, tail, sheet, ENGINE_TIMEOUT).await {
            Ok(answer) => answer,
            Err(e) => {
                if too_big {
                    shared.engine.forget(sid.clone());
                }
                return Err(format!("{sid}: {e}"));
            }
        };
        builder.mark_sent();
        let engine = started.elapsed();
        conversation::rewrite(bytes, &raw, &builder, &edits, &mut memory);
        let spliced = started.elapsed() - engine;
        let head = Arc::new(raw::Head { api, body: bytes.clone(), raw });
        let layout = shared.conversations.keep(&sid, &mut held, conversation::Conversation::new(head, builder, memory));
        if too_big {
            shared.conversations.forget(&sid, &mut held);
            ticket.forget_after();
        }
        let (parse, map, engine_us, write) =
            (parsed, was_mapped - parsed, engine - was_mapped, started.elapsed() - engine);
        let resumed = matches!(read, conversation::Read::After(_));
        if resumed {
            shared.conversations.count_resumed();
        }
        tracing::debug!(session = sid, edits = edits.len(), base, resumed, bytes = bytes.len(), ?parse, ?matched, ?map, engine = ?engine_us, ?write, ?spliced, "pruned");
        Ok(Pruned { layout, ticket: Some(ticket) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_the_proxy_accepts_has_the_big_receive_buffer_where_the_system_allows_one() {
        let listener = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let socket = tokio::net::TcpSocket::from_std_stream(accepted.into_std().unwrap());
        let size = socket.recv_buffer_size().unwrap();
        if let Some(wanted) = socket_buffer(Buffer::Receive) {
            assert!(size >= wanted, "the accepted connection's buffer is {size} bytes");
        }
        drop(client);
    }
}
