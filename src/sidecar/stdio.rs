//! The sidecar's line loop: protocol lines in on stdin, answers out on stdout.
//!
//! Requests are read and answered with plain blocking I/O on the server's thread (a reader
//! thread hands it the lines), since every hop through an async runtime's I/O threads adds a
//! thread wake-up to the round trip. Between requests the server counts tokens ahead and
//! hands out the saves that fall due. A line over the size limit or not in UTF-8 (as
//! [`stream`] reads them) gets an error answer and is skipped; reading goes on.

use std::io::{Read, Write};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use super::protocol::{self, code, RpcError};
use super::stream::{self, Line, LineLimits};
use super::{ServeOptions, Server};
use crate::state::saver::Saver;

/// Reads `input`'s lines on their own thread, so that waiting for one can give way to a save
/// that falls due.
fn spawn_reader(
    input: impl Read + Send + 'static,
    limits: LineLimits,
) -> std::io::Result<Receiver<std::io::Result<Line>>> {
    let (tx, lines) = std::sync::mpsc::sync_channel(16);
    let reader = std::thread::Builder::new().name("dcp-read".to_string());
    // Without a reader thread the sidecar cannot read at all: that is a failure to start.
    reader.spawn(move || {
        let mut reader = std::io::BufReader::with_capacity(1 << 20, input);
        loop {
            let line = stream::read_request_line(&mut reader, limits);
            let last = matches!(line, Ok(Line::Eof) | Err(_));
            if tx.send(line).is_err() || last {
                return;
            }
        }
    })?;
    Ok(lines)
}

/// When the memory freed since the last trim is handed back to the system: after counting
/// ahead dropped this much text, or this long after the last trim. A trim walks the whole heap
/// (0.1 ms at 2,000 messages, 0.3-1 ms at 20,000, on the server's thread), which a step's few
/// new parts do not pay for on every request; but the steps' own garbage, never trimmed, grows
/// the resident set (7 MB over 20 steps at 20,000 messages).
const TRIM_AFTER_BYTES: usize = 4 << 20;
const TRIM_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// What was freed since the memory was last handed back.
struct Freed {
    dropped: usize,
    trimmed: Instant,
}

impl Freed {
    fn due(&self) -> bool {
        self.dropped >= TRIM_AFTER_BYTES || self.trimmed.elapsed() >= TRIM_AFTER
    }

    fn release(&mut self) {
        release_memory();
        *self = Freed { dropped: 0, trimmed: Instant::now() };
    }
}

/// The next line, counting ahead while none waits and handing out the saves that fall due.
/// `freed` is what was freed since the memory was last handed back.
fn next_line(server: &mut Server, lines: &Receiver<std::io::Result<Line>>, freed: &mut Freed) -> std::io::Result<Line> {
    // A line that came in while the server counted ahead.
    let mut early = None;
    loop {
        if early.is_none() && !server.save_is_due() && server.has_precount() {
            freed.dropped += server.precount(|| {
                if early.is_none() {
                    early = lines.try_recv().ok();
                }
                early.is_none()
            });
            if !server.has_precount() && freed.due() {
                // The parts counted since the last request were slimmed: what they held is free.
                freed.release();
            }
        }
        if let Some(line) = early.take() {
            return line;
        }
        match server.save_due() {
            Some(due) => match lines.recv_timeout(due.saturating_duration_since(Instant::now())) {
                Ok(line) => return line,
                Err(RecvTimeoutError::Timeout) => server.save_waiting(),
                Err(RecvTimeoutError::Disconnected) => return Ok(Line::Eof),
            },
            None => return lines.recv().unwrap_or(Ok(Line::Eof)),
        }
    }
}

/// Hands the memory freed since the last call back to the system (glibc keeps it otherwise:
/// after a long first request, the line's buffers and what slimming dropped stay resident).
fn release_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; it is safe to call at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Has glibc serve every thread from one arena. By default a thread gets an arena of its
/// own: the reader thread parses a long first request in one, the server thread resolves,
/// indexes and answers it in another, and what each frees stays in its arena, out of the
/// other's reach (at 20,000 messages the peak was 18 MB higher). Called before the threads
/// start; the sidecar's threads rarely allocate at the same time, so they seldom contend.
///
/// It also keeps every block of 256 KB or more out of the heap, mapped on its own and given
/// back when freed. glibc raises that threshold as big blocks are freed (up to 32 MB), after
/// which a rewrite of thousands of calls builds its edits, its answer and the state file's
/// save in the heap, where they leave holes no trim returns: at 20,000 messages such a
/// rewrite took the peak from 90 to 102 MB; with the threshold fixed, 94 MB (issue 17, part E;
/// docs/history/benchmarks-rounds.md).
fn one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's allocation parameters.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

/// The answer to a line, if it gets one; `None` for the end of the input as well.
fn answer(server: &mut Server, line: Line, max_line: usize) -> Option<String> {
    let e = match line {
        Line::Eof | Line::Head(_) | Line::Blank => return None,
        Line::Text(line) => return server.handle_line(&line),
        Line::Parsed(request) => {
            let answer = server.handle_decoded(*request);
            release_memory();
            return answer;
        }
        Line::TooLong(n) => {
            RpcError::new(code::LINE_TOO_LONG, format!("line of {n} bytes is over the {max_line}-byte limit; skipped"))
        }
        Line::NotUtf8(at) => RpcError::new(code::PARSE, format!("line is not UTF-8 (invalid byte at offset {at})")),
    };
    tracing::warn!("protocol: {}", e.message);
    Some(protocol::err(None, &e))
}

/// Asks for a pipe of 1 MB on stdin, where the kernel gives 64 KB: the plugin writes a first
/// request as it encodes it, and hands the pipe what it made each time its event loop turns;
/// a wider pipe takes more of it per turn. Where stdin is no pipe, or the system allows no
/// wider one, nothing changes.
fn widen_stdin_pipe() {
    #[cfg(target_os = "linux")]
    // SAFETY: F_SETPIPE_SZ only resizes the pipe's buffer; on any other file it fails harmlessly.
    unsafe {
        libc::fcntl(0, libc::F_SETPIPE_SZ, 1 << 20);
    }
}

/// Runs the sidecar on stdin and stdout until stdin closes or `shutdown` arrives.
pub fn serve(options: ServeOptions) -> anyhow::Result<()> {
    widen_stdin_pipe();
    serve_on(options, std::io::stdin(), std::io::stdout().lock(), LineLimits::default())
}

/// Runs the sidecar on `input` and `output` until `input` ends or `shutdown` arrives,
/// with `limits` on its lines. The saver's writes run on a one-worker tokio runtime.
pub fn serve_on(
    options: ServeOptions,
    input: impl Read + Send + 'static,
    mut output: impl Write,
    limits: LineLimits,
) -> anyhow::Result<()> {
    one_arena();
    crate::tokens::preload();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let saver = {
        let _context = runtime.enter();
        Saver::spawn()
    };
    let mut server = Server::new(options, Some(saver.clone()))?;
    let lines = spawn_reader(input, limits)?;
    let mut freed = Freed { dropped: 0, trimmed: Instant::now() };
    loop {
        let line = next_line(&mut server, &lines, &mut freed)?;
        if matches!(line, Line::Eof) {
            break;
        }
        if let Some(mut response) = answer(&mut server, line, limits.max) {
            response.push('\n');
            if output.write_all(response.as_bytes()).is_err() || output.flush().is_err() {
                break;
            }
        }
        if server.shutting_down() {
            break;
        }
    }
    server.save_dirty();
    runtime.block_on(saver.flush());
    Ok(())
}
