//! The proxy's connections: the listening socket, the connections it accepts, and the bounds
//! that keep a slow or hostile client from holding them.
//!
//! At most [`Limits::connections`] connections are served at once; past that, new ones wait
//! in the kernel's queue until one closes. The default is what the open-file limit allows
//! (`ulimit -n`: two descriptors a connection, the client's and the upstream's, and some to
//! spare), at most [`CONNECTIONS`]. A request's head must arrive within
//! [`Limits::read_timeout`] of the connection's readiness for it (an idle kept-alive
//! connection is closed then too), and its body may pause no longer than that between two
//! of its bytes ([`ClientBody`]); a connection that breaks either is closed. An accept that
//! fails (no descriptor left, say) is retried after a pause that doubles up to a second, and
//! a run of them is logged once, when it starts, and once more when accepting works again.
//! The sockets' kernel buffers are sized here too ([`socket_buffer`]): the connections' and
//! the upstream client's.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};

use super::client_body::ClientBody;

/// The most connections served at once by default.
pub const CONNECTIONS: usize = 256;
/// How long a request's head, or a pause in its body, may take by default.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Descriptors kept for what is not a connection: the listener, the runtime's, state files
/// and logs.
const SPARE_DESCRIPTORS: u64 = 32;
/// The longest pause between two failed accepts.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// How much the proxy serves at once, and how long it waits for a client.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub connections: usize,
    pub read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { connections: CONNECTIONS, read_timeout: READ_TIMEOUT }
    }
}

/// The process's open-file limit (its soft limit), when the system says.
pub fn open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the limit into the struct it is given.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
        ok.then_some(limit.rlim_cur as u64)
    }
    #[cfg(not(unix))]
    None
}

/// The connections served at once when `--max-connections` is not given: [`CONNECTIONS`],
/// or fewer when the open-file limit `files` would run out first.
pub fn default_connections(files: Option<u64>) -> usize {
    let allowed = files.map_or(CONNECTIONS as u64, |n| n.saturating_sub(SPARE_DESCRIPTORS) / 2);
    (allowed.min(CONNECTIONS as u64) as usize).max(1)
}

/// Why the proxy could not listen on `addr`, and what to do: a port another program holds,
/// one that needs privileges, an address not of this machine.
pub fn listen_error(addr: SocketAddr, e: &std::io::Error) -> anyhow::Error {
    use std::io::ErrorKind;
    let what = match e.kind() {
        ErrorKind::AddrInUse => {
            "; another program listens there (another dcp proxy?): stop it, or pass \
             --listen 127.0.0.1:PORT with a free port and give the client that port"
        }
        ErrorKind::PermissionDenied => {
            "; this user may not listen on that port: pass --listen 127.0.0.1:PORT with a port above 1023"
        }
        ErrorKind::AddrNotAvailable => "; that is not an address of this machine: pass --listen 127.0.0.1:PORT",
        _ => "",
    };
    anyhow::anyhow!("cannot listen on {addr}: {e}{what}")
}

/// Accepts connections, at most `limits.connections` at once, and serves each on its own task,
/// each request with `handle`.
pub async fn accept_loop<H, F, B>(listener: &tokio::net::TcpListener, limits: Limits, handle: H) -> anyhow::Result<()>
where
    H: Fn(Request<ClientBody>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    let mut failing = Failing::default();
    let mut full_since: Option<Instant> = None;
    loop {
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if full_since.is_none_or(|at| at.elapsed() > Duration::from_secs(60)) {
                    tracing::warn!(
                        "{} connections are open, the most the proxy serves at once (--max-connections): new ones \
                         wait until one closes",
                        limits.connections
                    );
                    full_since = Some(Instant::now());
                }
                Arc::clone(&permits).acquire_owned().await?
            }
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                if let Some(told) = failing.failed(&e) {
                    tracing::warn!("{told}");
                }
                tokio::time::sleep(failing.pause()).await;
                continue;
            }
        };
        if let Some(told) = failing.recovered() {
            tracing::warn!("{told}");
        }
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        tokio::spawn(async move {
            serve(stream, handle, limits.read_timeout).await;
            drop(permit);
        });
    }
}

/// Serves one connection's requests with `handle` until it closes, or its client is too slow.
async fn serve<H, F, B>(stream: tokio::net::TcpStream, handle: H, read_timeout: Duration)
where
    H: Fn(Request<ClientBody>) -> F + Send + 'static,
    F: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        handle(req.map(|body| ClientBody::new(body, read_timeout)))
    });
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(read_timeout);
    if let Err(e) = builder.serve_connection(TokioIo::new(stream), service).await {
        tracing::debug!("connection: {e}");
    }
}

/// A run of failed accepts: when it started, how many, and the pause before the next try.
#[derive(Debug, Default)]
struct Failing {
    since: Option<Instant>,
    count: u64,
    pause: Duration,
}

impl Failing {
    /// Counts a failed accept; the words to log when it starts a run.
    fn failed(&mut self, e: &std::io::Error) -> Option<String> {
        self.count += 1;
        self.pause = (self.pause * 2).clamp(Duration::from_millis(10), LONGEST_PAUSE);
        if self.since.is_some() {
            return None;
        }
        self.since = Some(Instant::now());
        let files = open_file_limit().map(|n| format!(" (the open-file limit, ulimit -n, is {n})")).unwrap_or_default();
        let why = match e.raw_os_error() {
            #[cfg(unix)]
            Some(libc::EMFILE | libc::ENFILE) => {
                format!(": no file descriptor is left{files}; new connections wait until some close")
            }
            _ => String::new(),
        };
        Some(format!("cannot accept connections: {e}{why}"))
    }

    /// How long to wait before the next accept.
    fn pause(&self) -> Duration {
        self.pause
    }

    /// Ends a run of failed accepts; the words to log when there was one.
    fn recovered(&mut self) -> Option<String> {
        let since = self.since.take()?;
        let (count, seconds) = (std::mem::take(&mut self.count), since.elapsed().as_secs_f64());
        self.pause = Duration::ZERO;
        Some(format!("accepting connections again, after {count} failed accepts over {seconds:.1} s"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_connection_cap_leaves_two_descriptors_a_connection_within_the_open_file_limit() {
        assert_eq!(default_connections(None), CONNECTIONS);
        assert_eq!(default_connections(Some(1 << 20)), CONNECTIONS);
        assert_eq!(default_connections(Some(64)), 16);
        assert_eq!(default_connections(Some(10)), 1, "one connection at least");
    }

    #[test]
    fn a_run_of_failed_accepts_is_told_once_when_it_starts_and_once_when_it_ends_its_pause_doubling_to_a_second() {
        let mut failing = Failing::default();
        let emfile = std::io::Error::from_raw_os_error(24);
        let first = failing.failed(&emfile).expect("the first failure is told");
        assert!(first.contains("no file descriptor is left"), "{first}");
        let mut pauses = vec![failing.pause()];
        for _ in 0..1000 {
            assert!(failing.failed(&emfile).is_none(), "the rest of the run is not");
            pauses.push(failing.pause());
        }
        assert_eq!(pauses[0], Duration::from_millis(10));
        assert!(pauses.windows(2).all(|w| w[1] >= w[0]) && *pauses.last().unwrap() == LONGEST_PAUSE);
        let told = failing.recovered().expect("the end of the run is told");
        assert!(told.contains("after 1001 failed accepts"), "{told}");
        assert!(failing.recovered().is_none());
        assert!(failing.failed(&emfile).is_some(), "a new run is told again");
        assert_eq!(failing.pause(), Duration::from_millis(10));
    }
}

/// The kernel's buffer for each connection's request, given by the listening socket to the
/// connections it accepts (`SO_RCVBUF`), and for each request to the upstream (`SO_SNDBUF`,
/// [`super::forward::client`]). A long conversation's body is several megabytes: a buffer this size
/// from the first byte lets the client write it in a few large writes, and the proxy read
/// and send it in a few large pieces, where the buffers the kernel grows on its own start at
/// a few kilobytes.
pub const SOCKET_BUFFER: u32 = 4 << 20;

/// Which of a socket's buffers.
#[derive(Debug, Clone, Copy)]
pub enum Buffer {
    Receive,
    Send,
}

/// [`SOCKET_BUFFER`] when the system lets a socket have a buffer that big (Linux's
/// `net.core.rmem_max` and `wmem_max`); else `None`, and the kernel sizes the buffer: a
/// size set is a size fixed, and one cut down to a small maximum would be worse than the
/// kernel's own.
pub fn socket_buffer(which: Buffer) -> Option<u32> {
    let name = match which {
        Buffer::Receive => "rmem_max",
        Buffer::Send => "wmem_max",
    };
    let max = std::fs::read_to_string(format!("/proc/sys/net/core/{name}")).ok()?;
    (max.trim().parse::<u64>().ok()? >= u64::from(SOCKET_BUFFER)).then_some(SOCKET_BUFFER)
}
