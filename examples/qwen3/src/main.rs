//! `qwen3`: chat with a Qwen3 model directory.

use std::process::ExitCode;

use clap::Parser;
use logits_qwen3::{app, cli::Args};

fn main() -> ExitCode {
    let args = Args::parse();
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
