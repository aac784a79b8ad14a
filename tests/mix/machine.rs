//! The machine a benchmark ran on, printed with its figures (the criterion benches and
//! the `bench` example): CPU model, the SIMD level the crate dispatches to, rustc, the
//! crate's version and the commit.

use std::process::Command;

/// What a figure depends on besides the code.
#[derive(Clone, Debug)]
pub struct Machine {
    /// The CPU's model name (`/proc/cpuinfo` on Linux), or `unknown`.
    pub cpu: String,
    /// [`logits::simd_level`].
    pub simd: String,
    /// `rustc --version` run at run time in the crate's directory, or `unknown`.
    pub rustc: String,
    /// The crate's version.
    pub version: String,
    /// `git rev-parse --short HEAD` in the crate's directory, with `-dirty` when tracked
    /// files differ from it, or `unknown`.
    pub commit: String,
}

/// The first line of a command's output, run in the crate's directory.
fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?;
    let line = s.lines().next()?.trim().to_string();
    (!line.is_empty()).then_some(line)
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

impl Machine {
    /// Detects the machine.
    pub fn detect() -> Machine {
        let commit = output("git", &["rev-parse", "--short", "HEAD"]).map(|c| {
            let dirty = output("git", &["status", "--porcelain", "--untracked-files=no"]);
            if dirty.is_some() {
                format!("{c}-dirty")
            } else {
                c
            }
        });
        let unknown = || "unknown".to_string();
        Machine {
            cpu: cpu_model().unwrap_or_else(unknown),
            simd: logits::simd_level().to_string(),
            rustc: output("rustc", &["--version"]).unwrap_or_else(unknown),
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: commit.unwrap_or_else(unknown),
        }
    }

    /// One line: `cpu ... · simd ... · rustc ... · logits ... · commit ...`.
    pub fn line(&self) -> String {
        format!(
            "cpu {} · simd {} · {} · logits {} · commit {}",
            self.cpu, self.simd, self.rustc, self.version, self.commit
        )
    }

    /// The CSV column names, in the order of [`Machine::csv_values`].
    pub const CSV_COLUMNS: &'static str = "cpu,simd,rustc,crate_version,commit";

    /// The CSV values (each quoted).
    pub fn csv_values(&self) -> String {
        [
            &self.cpu,
            &self.simd,
            &self.rustc,
            &self.version,
            &self.commit,
        ]
        .iter()
        .map(|v| format!("\"{}\"", v.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(",")
    }
}
