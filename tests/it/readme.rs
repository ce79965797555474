//! The commands of the README and of the guide (docs/**/*.md), run in order on a clean copy
//! of the repository, succeed and leave `git status` clean: a newcomer who follows them
//! never overwrites a tracked file (the committed reference results in `results/` included)
//! nor leaves an unignored one. The README runs first, then the guide's chapters in path
//! order, all in the same copy (so a chapter may read what the README's `sim run` wrote).
//!
//! Commands are extracted from each file as it is, so the test follows it:
//! * every line of a ```` ```sh ```` block (backslash continuations joined, `#` comments
//!   dropped), and every `$ ` line of an unlabelled block (a transcript);
//! * `cargo run --release -- ARGS` runs as `sim ARGS`; other `cargo` commands (the test
//!   suite itself) are not run;
//! * a block labelled ```` ```sh long ```` holds slow commands: its `sim sweep`s run with
//!   `--seeds 1` (same grid, one seed), its other commands are not run;
//! * a block labelled ```` ```sh no-run ```` (a batch script for another machine) is not run;
//!   nor is any other label (```` ```text ```` for a synopsis or an excerpt too slow to rerun).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Block {
    /// ```sh: commands to run.
    Sh,
    /// ```sh long: slow commands, shortened or skipped.
    Long,
    /// ``` with no language: a transcript, whose `$ ` lines are commands.
    Transcript,
    /// Anything else (TOML, YAML, `sh no-run`, ...): not run.
    Other,
}

#[derive(Debug, PartialEq)]
struct ReadmeCommand {
    line: usize,
    text: String,
    long: bool,
}

/// Extracts the commands the README shows (see the module comment).
fn commands(readme: &str) -> Vec<ReadmeCommand> {
    let mut out = Vec::new();
    let mut block: Option<Block> = None;
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in readme.lines().enumerate() {
        let line = raw.trim_end();
        if let Some(info) = line.trim_start().strip_prefix("```") {
            block = match (block, info.split_whitespace().collect::<Vec<_>>().as_slice()) {
                (Some(_), _) => None,
                (None, ["sh"]) => Some(Block::Sh),
                (None, ["sh", "long"]) => Some(Block::Long),
                (None, []) => Some(Block::Transcript),
                (None, _) => Some(Block::Other),
            };
            continue;
        }
        let cmd = match block {
            Some(Block::Sh | Block::Long) => line.trim_start(),
            Some(Block::Transcript) => match line.strip_prefix("$ ") {
                Some(c) => c,
                None => continue,
            },
            Some(Block::Other) | None => continue,
        };
        let cmd = strip_comment(cmd);
        let (start, mut text) = pending.take().unwrap_or((i + 1, String::new()));
        if let Some(head) = cmd.strip_suffix('\\') {
            text.push_str(head);
            pending = Some((start, text));
            continue;
        }
        text.push_str(cmd);
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if !text.is_empty() {
            out.push(ReadmeCommand {
                line: start,
                text,
                long: block == Some(Block::Long),
            });
        }
    }
    out
}

/// Drops a `#` comment (a `#` at the start or after a space, outside quotes).
fn strip_comment(s: &str) -> &str {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, '#') if prev.is_whitespace() => return s[..i].trim_end(),
            _ => {}
        }
        prev = c;
    }
    s
}

/// What the test runs for a README command, or None when it is not run.
fn runnable(c: &ReadmeCommand) -> Option<String> {
    let text = match c.text.strip_prefix("cargo run --release -- ") {
        Some(rest) => format!("sim {rest}"),
        None if c.text.starts_with("cargo ") => return None,
        None => c.text.clone(),
    };
    if c.long {
        if !text.starts_with("sim sweep ") {
            return None;
        }
        let mut words: Vec<&str> = text.split(' ').collect();
        match words.iter().position(|w| *w == "--seeds") {
            Some(i) if i + 1 < words.len() => words[i + 1] = "1",
            _ => words.extend(["--seeds", "1"]),
        }
        return Some(words.join(" "));
    }
    Some(text)
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh repository holding exactly the tracked files of this checkout, as they are in
/// the working tree (so uncommitted README edits are tested too), committed; None when
/// this is not a git checkout.
fn clean_copy() -> Option<tempfile::TempDir> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let listed = Command::new("git")
        .current_dir(&root)
        .args(["ls-files", "-z"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let tmp = tempfile::tempdir().unwrap();
    for f in listed.stdout.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let rel = Path::new(std::str::from_utf8(f).unwrap());
        let src = root.join(rel);
        if !src.exists() {
            continue; // deleted in the working tree, not yet committed
        }
        let dst = tmp.path().join(rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&src, &dst).unwrap();
    }
    git(tmp.path(), &["init", "-q"]);
    git(tmp.path(), &["add", "-A"]);
    git(tmp.path(), &["commit", "-q", "-m", "clean checkout"]);
    Some(tmp)
}

/// Guide files whose commands are not run, with the reason. burst8-atlas.md reproduces its
/// tables with full 200-seed sweeps in a plain ```` ```sh ```` block (many minutes); once
/// that block is labelled ```` ```sh long ```` it can leave this list.
const NOT_RUN: &[(&str, &str)] = &[("docs/burst8-atlas.md", "full 200-seed sweeps in a plain sh block")];

#[test]
fn readme_and_guide_commands_leave_the_checkout_clean() {
    let Some(repo) = clean_copy() else {
        eprintln!("not a git checkout: the clean-checkout test needs `git ls-files`");
        return;
    };
    let mut cmds: Vec<(String, String)> = Vec::new();
    for doc in common::documents(repo.path()) {
        if NOT_RUN.iter().any(|(p, _)| Path::new(p) == doc) {
            continue;
        }
        let text = std::fs::read_to_string(repo.path().join(&doc)).unwrap();
        let found: Vec<(String, String)> = commands(&text)
            .iter()
            .filter_map(|c| runnable(c).map(|r| (format!("{}:{}", doc.display(), c.line), r)))
            .collect();
        if doc == Path::new("README.md") {
            assert!(
                found.iter().any(|(_, c)| c.starts_with("sim run "))
                    && found.iter().any(|(_, c)| c.starts_with("sim sweep ")),
                "the README shows no `sim run` and `sim sweep` commands: {found:?}"
            );
        }
        cmds.extend(found);
    }
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_sim"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (line, c) in &cmds {
        let out = Command::new("sh")
            .current_dir(repo.path())
            .env("PATH", &path)
            .args(["-c", c])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{line}: `{c}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let status = git(repo.path(), &["status", "--porcelain"]);
        assert!(status.is_empty(), "{line}: `{c}` changed the checkout:\n{status}");
    }
}

#[test]
fn skipped_guide_files_exist() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let docs = common::documents(&root);
    for (p, why) in NOT_RUN {
        assert!(
            docs.iter().any(|d| d == Path::new(p)),
            "NOT_RUN names {p} ({why}), which is not a guide file"
        );
    }
    assert!(docs.len() > 10 && docs[0] == Path::new("README.md"), "{docs:?}");
}

#[test]
fn extracts_sh_blocks_transcripts_and_long_blocks() {
    let md = "text `sim run inline` is prose\n\
              ```sh\n\
              cargo run --release -- run a.toml   # comment\n\
              sim sweep b.toml \\\n    -L x 1,2 \\\n    --seeds 3\n\
              # a comment line\n\
              ```\n\
              ```\n\
              $ sim explain out/a\n\
              output line\n\
              ```\n\
              ```sh long\n\
              sim sweep big.toml\n\
              sim sweep big.toml --seeds 20 --jobs 2\n\
              sim bench big.toml\n\
              ```\n\
              ```sh no-run\n\
              sim sweep slurm.toml --shard $K/32\n\
              ```\n\
              ```toml\n\
              $ not = \"a command\"\n\
              ```\n";
    let cmds = commands(md);
    let run: Vec<Option<String>> = cmds.iter().map(runnable).collect();
    assert_eq!(
        run,
        vec![
            Some("sim run a.toml".to_string()),
            Some("sim sweep b.toml -L x 1,2 --seeds 3".to_string()),
            Some("sim explain out/a".to_string()),
            Some("sim sweep big.toml --seeds 1".to_string()),
            Some("sim sweep big.toml --seeds 1 --jobs 2".to_string()),
            None,
        ]
    );
    assert_eq!(cmds[1].line, 4, "a command is located at its first line");
    assert_eq!(strip_comment("echo 'a # b' # c"), "echo 'a # b'");
}

#[test]
fn run_and_sweep_default_to_the_ignored_out_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let scen = common::scenario_path("burst8.toml");
    common::sim()
        .current_dir(tmp.path())
        .args(["run", scen.to_str().unwrap(), "--quiet"])
        .assert()
        .success();
    assert!(tmp.path().join("out/burst8/summary.json").is_file());
    common::sim()
        .current_dir(tmp.path())
        .args(["sweep", scen.to_str().unwrap(), "--seeds", "2", "--quiet", "--no-plots"])
        .assert()
        .success();
    assert!(tmp.path().join("out/burst8/sweep.json").is_file());
    assert!(!tmp.path().join("results").exists(), "nothing is written to results/");
    let ignore = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".gitignore")).unwrap();
    assert!(ignore.lines().any(|l| l.trim() == "/out/"), ".gitignore ignores out/");
}
