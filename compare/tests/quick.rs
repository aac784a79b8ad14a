//! Runs the comparison once, briefly (`--quick`): every implementation's draws must pass
//! the check and every implementation must be timed on every row.

use std::process::Command;

#[test]
fn quick_run_checks_and_times_every_implementation() {
    let out = Command::new(env!("CARGO_BIN_EXE_logits-compare"))
        .arg("--quick")
        .output()
        .expect("run logits-compare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "exit status {:?}", out.status);
    assert!(!stdout.contains("FAILED"));
    let names = [
        "logits Sampler",
        "logits Chain",
        "llama.cpp (vendored)",
        "candle LogitsProcessor",
        "sort baseline",
    ];
    for name in names {
        let checks = stdout
            .lines()
            .filter(|l| l.contains(name) && l.ends_with(" ok"))
            .count();
        let timed = stdout
            .lines()
            .filter(|l| (l.starts_with("llama ") || l.starts_with("qwen3 ")) && l.contains(name))
            .count();
        assert!(checks >= 2, "{name}: {checks} checks passed");
        assert!(timed >= 2, "{name}: timed on {timed} rows");
    }
}

#[test]
fn help_goes_to_stdout_and_bad_options_fail() {
    let help = Command::new(env!("CARGO_BIN_EXE_logits-compare"))
        .arg("--help")
        .output()
        .expect("run logits-compare");
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("--quick"));
    let bad = Command::new(env!("CARGO_BIN_EXE_logits-compare"))
        .arg("--bogus")
        .output()
        .expect("run logits-compare");
    assert_eq!(bad.status.code(), Some(2));
}
