//! The identity of the running build: the crate version plus the git commit it was built
//! from (`build.rs`), or a SHA-256 of the binary itself when it was not built from a git
//! checkout or the checkout had uncommitted source changes. Shard and partial sweep files
//! record it so `sim merge` and `sim sweep --resume` refuse to mix rows of two builds.

use std::sync::OnceLock;

/// `fleetsim 0.1.0 git <commit>`, or `... git <commit>-dirty sha256 <hash>`, or
/// `fleetsim 0.1.0 sha256 <hash of the binary>`.
pub fn identity() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let version = env!("CARGO_PKG_VERSION");
        let commit = env!("FLEETSIM_GIT_COMMIT");
        if !commit.is_empty() && !commit.ends_with("-dirty") {
            return format!("fleetsim {version} git {commit}");
        }
        let exe = std::env::current_exe()
            .and_then(std::fs::read)
            .map(|b| super::sha256_hex(&b)[..16].to_string())
            .unwrap_or_else(|_| "unknown".into());
        if commit.is_empty() {
            format!("fleetsim {version} sha256 {exe}")
        } else {
            format!("fleetsim {version} git {commit} sha256 {exe}")
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_the_version_and_a_commit_or_binary_hash() {
        let id = super::identity();
        assert!(
            id.starts_with(concat!("fleetsim ", env!("CARGO_PKG_VERSION"), " ")),
            "{id}"
        );
        assert!(id.contains(" git ") || id.contains(" sha256 "), "{id}");
        assert_eq!(id, super::identity(), "stable within a process");
    }
}
