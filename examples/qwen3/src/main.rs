//! `qwen3`: chat with a Qwen3 model directory.

use std::process::ExitCode;

use clap::Parser;
use logits_qwen3::{app, cli::Args};

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        // --help and --version print to stdout and succeed; a bad flag is bad
        // input like any other: its message, then exit code 1.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(1);
        }
    };
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match app::run(&args, &mut out, &mut input) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
