//! `dcp-testkit`: see [`dcp_testkit::cli`].

fn main() -> std::process::ExitCode {
    match dcp_testkit::cli::run(std::env::args_os().skip(1), &mut std::io::stdout().lock()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dcp-testkit: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
