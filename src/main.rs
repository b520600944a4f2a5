//! The `dcp` binary: parses arguments, runs the CLI, and turns errors into exit codes.
//!
//! Exit codes: 0 success, 1 an error (printed as `dcp: <error chain>`), 2 bad usage. A broken
//! pipe on stdout (`dcp sessions | head`) is success.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let cli = match dcp::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    // Not `stdout().lock()`: `dcp serve` writes to stdout from its own tasks.
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let result = dcp::cli::run(cli, &mut out).and_then(|()| out.flush().map_err(Into::into));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            // What the command printed before it failed comes first, as it would have on its
            // own: a terminal shows stdout and stderr in the order they are written.
            let _ = out.flush();
            // An error can quote a path, a key or a value: escape what a terminal would act on.
            let text = format!("{err:#}");
            // One write: a reader of the pipe (the plugin) may otherwise get `dcp: ` alone.
            let line = format!("dcp: {}\n", dcp::format::terminal(&text, dcp::format::Lines::Keep));
            let _ = std::io::stderr().write_all(line.as_bytes());
            ExitCode::FAILURE
        }
    }
}

/// Prints what clap says of bad arguments (or the help and version it was asked for) and
/// returns its exit code. A usage error quotes what the user typed, which a terminal would act
/// on: it is printed without clap's colours, its control characters escaped.
fn usage_error(e: &clap::Error) -> ExitCode {
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::from(e.exit_code() as u8);
    }
    let text = e.render().to_string();
    eprint!("{}", dcp::format::terminal(&text, dcp::format::Lines::Keep));
    ExitCode::from(e.exit_code() as u8)
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == BrokenPipe)
            || e.downcast_ref::<serde_json::Error>().is_some_and(|j| j.io_error_kind() == Some(BrokenPipe))
    })
}
