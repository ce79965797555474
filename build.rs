//! Records the git commit the binary is built from (`FLEETSIM_GIT_COMMIT`, empty when not
//! built from a git checkout, `-dirty` appended when tracked sources differ from it), so
//! sweep shards and partial files can refuse rows from another build (`src/build_id.rs`).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=crates");
    println!("cargo:rerun-if-changed=Cargo.toml");
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    if !commit.is_empty() {
        // A new commit or checkout moves HEAD (or the branch it points to).
        for p in ["HEAD", "index"] {
            if let Some(path) = git(&["rev-parse", "--git-path", p]) {
                println!("cargo:rerun-if-changed={path}");
            }
        }
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"])
            && let Some(path) = git(&["rev-parse", "--git-path", &r])
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let dirty = !commit.is_empty()
        && git(&[
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            "src",
            "crates",
            "Cargo.toml",
            "Cargo.lock",
            "build.rs",
        ])
        .is_some_and(|s| !s.is_empty());
    let id = if dirty { format!("{commit}-dirty") } else { commit };
    println!("cargo:rustc-env=FLEETSIM_GIT_COMMIT={id}");
}
