//! Generated blocks inside the hand-written pages (README.md and the guide, `docs/**/*.md`):
//! the counts, the policy table and the command tables, rewritten from the code between
//! markers so that they cannot drift from it.
//!
//! A block is `<!-- generated: NAME -->`, the generated text, `<!-- /generated -->`. A table
//! or a code block (several lines) starts on the line after the opening marker and ends
//! with a blank line before the closing one; a count sits between the two markers on one
//! line (`<!-- generated: policy-count -->16<!-- /generated -->`), which renders as the bare
//! number. Everything outside the markers is left as written; a marker quoted in a code
//! span (right after a backtick) is prose, not a block.
//!
//! Owns: the marker syntax and the text of each block. Sees: the policy registry (through
//! its catalogue) and the CLI's clap command tree; never a run, a clock or a file beyond the
//! page it is given. Invariant: a block's text is a pure function of the code and of the
//! page's place in the repository (its links are relative), so `tests/it/reference.rs` can
//! compare the committed pages with it.

use std::path::{Component, Path, PathBuf};

use crate::policy::catalogue::{PolicyDoc, catalogue};

/// Opens a generated block; the block's name and ` -->` follow.
pub const BEGIN: &str = "<!-- generated: ";
/// Closes a generated block.
pub const END: &str = "<!-- /generated -->";

/// Every block name, with what it holds.
pub const NAMES: &[(&str, &str)] = &[
    ("policy-count", "the number of router policies (inline)"),
    ("command-count", "the number of `sim` subcommands (inline)"),
    (
        "policy-table",
        "kind, what it reproduces, how it decides, what it reads",
    ),
    ("commands", "every subcommand with its arguments and what it does"),
    ("synopsis", "every subcommand with all its flags, as a text block"),
];

/// What the code generates for block `name` on the page at `page` (repository-relative),
/// from the CLI's command tree `cli` (built: `clap::Command::build`); None for an unknown
/// name. The tree is a parameter so that this module needs nothing of the CLI's.
pub fn generate(name: &str, page: &Path, cli: &clap::Command) -> Option<String> {
    let policies = catalogue();
    Some(match name {
        "policy-count" => policies.len().to_string(),
        "command-count" => subcommands(cli).count().to_string(),
        "policy-table" => policy_table(&policies, &relative(page, Path::new("docs/reference/policies.md"))),
        "commands" => command_table(cli),
        "synopsis" => synopsis(cli),
        _ => return None,
    })
}

/// One block found in a page.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// Its name.
    pub name: String,
    /// The 1-based line of its opening marker.
    pub line: usize,
    /// Byte range of its text (between the markers).
    pub text: std::ops::Range<usize>,
}

/// Every generated block of `page`, in order; Err names the line of a malformed marker (no
/// name, no closing marker, a block opened inside another, an unknown name).
pub fn find(page: &str) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = page[at..].find(BEGIN).map(|i| at + i) {
        if page[..i].ends_with('`') {
            // The syntax quoted in prose (`<!-- generated: NAME -->`), not a marker.
            at = i + BEGIN.len();
            continue;
        }
        let line = page[..i].matches('\n').count() + 1;
        let after = i + BEGIN.len();
        let close = page[after..]
            .find("-->")
            .ok_or_else(|| format!("line {line}: `{BEGIN}` is never closed with `-->`"))?;
        let name = page[after..after + close].trim().to_string();
        if !NAMES.iter().any(|(n, _)| *n == name) {
            let known: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "line {line}: unknown generated block `{name}` (known: {})",
                known.join(", ")
            ));
        }
        let start = after + close + "-->".len();
        let end = page[start..]
            .find(END)
            .map(|e| start + e)
            .ok_or_else(|| format!("line {line}: block `{name}` has no closing `{END}`"))?;
        if page[start..end].contains(BEGIN) {
            return Err(format!(
                "line {line}: block `{name}` is not closed before the next one opens"
            ));
        }
        out.push(Block {
            name,
            line,
            text: start..end,
        });
        at = end + END.len();
    }
    Ok(out)
}

/// The text between the markers: a multi-line block on lines of its own, ended by a blank
/// line (so a table ends before the closing marker on every Markdown renderer).
fn framed(generated: &str) -> String {
    if generated.contains('\n') {
        format!("\n{generated}\n")
    } else {
        generated.to_string()
    }
}

/// `page` (at repository path `path`) with every generated block rewritten from the command
/// tree `cli`, and the blocks whose text differed.
pub fn rewrite(page: &str, path: &Path, cli: &clap::Command) -> Result<(String, Vec<Block>), String> {
    let mut out = String::with_capacity(page.len());
    let mut stale = Vec::new();
    let mut at = 0;
    for b in find(page)? {
        let text = framed(&generate(&b.name, path, cli).expect("find() accepts known names only"));
        out.push_str(&page[at..b.text.start]);
        out.push_str(&text);
        if page[b.text.clone()] != text {
            stale.push(b.clone());
        }
        at = b.text.end;
    }
    out.push_str(&page[at..]);
    Ok((out, stale))
}

/// The pages that may hold generated blocks, repository-relative, in path order: README.md
/// and every Markdown file under docs/ except the generated reference itself.
pub fn pages(root: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            return;
        };
        let mut names: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| dir.join(e.file_name()))
            .collect();
        names.sort();
        for p in names {
            if root.join(&p).is_dir() {
                if p != Path::new("docs/reference") {
                    walk(root, &p, out);
                }
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![PathBuf::from("README.md")];
    walk(root, Path::new("docs"), &mut out);
    out.retain(|p| root.join(p).is_file());
    out
}

/// `target` as a link from the page at `page` (both repository-relative).
fn relative(page: &Path, target: &Path) -> String {
    let from: Vec<Component> = page.parent().map(|d| d.components().collect()).unwrap_or_default();
    let to: Vec<Component> = target.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_string(); from.len() - common];
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

/// Text for a Markdown table cell: one line, `|` escaped, `<` as an entity (so
/// `out/<name>/` is not read as an HTML tag).
fn cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
        .replace('<', "&lt;")
}

/// The policy table: each kind (linked to its section of the policy reference at `link`),
/// the upstream code it reproduces, how it decides and what it reads.
pub fn policy_table(policies: &[PolicyDoc], link: &str) -> String {
    let mut s = String::from("| kind | reproduces | decision | reads (freshness) |\n|---|---|---|---|\n");
    for p in policies {
        s.push_str(&format!(
            "| [`{k}`]({link}#{k}) | {} | {} | {} |\n",
            cell(p.source),
            cell(p.decision),
            cell(p.signals),
            k = p.kind,
        ));
    }
    s
}

/// The visible subcommands of `cmd` (clap's own `help` left out).
fn subcommands(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
}

/// Every runnable command under `cmd` as (`sim name [sub]`, its command), depth first:
/// a command with subcommands of its own (`sim trace`) stands for them.
fn leaves<'a>(prefix: &str, cmd: &'a clap::Command, out: &mut Vec<(String, &'a clap::Command)>) {
    for c in subcommands(cmd) {
        let name = format!("{prefix} {}", c.get_name());
        if c.has_subcommands() {
            leaves(&name, c, out);
        } else {
            out.push((name, c));
        }
    }
}

/// An argument as a synopsis shows it: `SCENARIO`, `[DIR]`, `--target URL`, `[--quiet]`,
/// `[--set PATH=VALUE]...`, and with `choices` a short list of values for the placeholder
/// (`[--engine fast|reference]`).
fn arg_text(a: &clap::Arg, choices: bool) -> String {
    let possible: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect();
    let values: Vec<String> = if !a.get_action().takes_values() {
        Vec::new()
    } else if choices && !possible.is_empty() && possible.len() <= 6 {
        vec![possible.join("|")]
    } else {
        match a.get_value_names() {
            Some(names) => names.iter().map(|n| n.to_string()).collect(),
            None => vec![a.get_id().as_str().to_uppercase()],
        }
    };
    let repeated = matches!(a.get_action(), clap::ArgAction::Append | clap::ArgAction::Count)
        || a.get_num_args().is_some_and(|n| n.max_values() > values.len().max(1));
    let mut text = match a.get_long() {
        Some(long) if !a.is_positional() => {
            let mut t = format!("--{long}");
            for v in &values {
                t.push(' ');
                t.push_str(v);
            }
            t
        }
        _ => values.join(" "),
    };
    if !a.is_required_set() {
        text = format!("[{text}]");
    }
    if repeated {
        text.push_str("...");
    }
    text
}

/// The arguments a synopsis shows for `cmd`: positionals first, then the options
/// (`required_only`: only the required ones, with placeholders rather than choices), help
/// and version left out.
fn args_text(cmd: &clap::Command, required_only: bool) -> Vec<String> {
    let shown = |a: &&clap::Arg| {
        !a.is_hide_set()
            && !matches!(
                a.get_action(),
                clap::ArgAction::Help | clap::ArgAction::HelpLong | clap::ArgAction::Version
            )
    };
    let text = |a: &clap::Arg| arg_text(a, !required_only);
    let positionals = cmd.get_positionals().filter(shown).map(text);
    let options = cmd
        .get_arguments()
        .filter(|a| !a.is_positional())
        .filter(shown)
        .filter(|a| !required_only || a.is_required_set())
        .map(text);
    positionals.chain(options).collect()
}

/// What a command does, in one clause: its doc comment's first paragraph (clap's `about`) up
/// to the first `; ` or `: ` outside parentheses (the rest says what it writes, in the
/// synopsis's `--help`).
fn summary(cmd: &clap::Command) -> String {
    let about = cmd.get_about().map(|s| s.to_string()).unwrap_or_default();
    let mut depth = 0i32;
    for (i, c) in about.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ';' | ':' if depth == 0 && about[i + 1..].starts_with(' ') => return about[..i].to_string(),
            _ => {}
        }
    }
    about
}

/// The command table: each subcommand with its positional and required arguments, and what
/// it does.
pub fn command_table(cli: &clap::Command) -> String {
    let mut rows = Vec::new();
    leaves("sim", cli, &mut rows);
    let mut s = String::from("| command | what it does |\n|---|---|\n");
    for (name, c) in rows {
        let usage = std::iter::once(name)
            .chain(args_text(c, true))
            .collect::<Vec<_>>()
            .join(" ");
        s.push_str(&format!(
            "| `{}` | {} |\n",
            usage.replace('|', "\\|"),
            cell(&summary(c))
        ));
    }
    s
}

/// Width at which a synopsis line wraps.
pub const SYNOPSIS_WIDTH: usize = 100;

/// Every subcommand with all its arguments, wrapped at [`SYNOPSIS_WIDTH`] with indented
/// continuation lines, as a fenced text block.
pub fn synopsis(cli: &clap::Command) -> String {
    let mut rows = Vec::new();
    leaves("sim", cli, &mut rows);
    let mut s = String::from("```text\n");
    for (name, c) in rows {
        let mut line = name;
        for word in args_text(c, false) {
            if line.len() + 1 + word.len() > SYNOPSIS_WIDTH {
                s.push_str(&line);
                s.push('\n');
                line = format!("    {word}");
            } else {
                line.push(' ');
                line.push_str(&word);
            }
        }
        s.push_str(&line);
        s.push('\n');
    }
    s.push_str("```\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The CLI's command tree, built (actions and value names as the parser sees them).
    fn cli() -> clap::Command {
        let mut cli = crate::cli::Cli::command();
        cli.build();
        cli
    }

    fn page(body: &str) -> String {
        format!("# Page\n\nThere are {BEGIN}policy-count -->3{END} policies.\n\n{BEGIN}commands -->\n{body}\n{END}\n")
    }

    #[test]
    fn finds_blocks_and_names_bad_markers() {
        let p = page("old table\n");
        let blocks = find(&p).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!((blocks[0].name.as_str(), blocks[0].line), ("policy-count", 3));
        assert_eq!(&p[blocks[0].text.clone()], "3");
        assert_eq!((blocks[1].name.as_str(), blocks[1].line), ("commands", 5));
        let unknown = find(&format!("a\n{BEGIN}nope -->x{END}")).unwrap_err();
        assert!(
            unknown.starts_with("line 2: unknown generated block `nope`"),
            "{unknown}"
        );
        assert!(
            find(&format!("{BEGIN}commands -->\nx\n"))
                .unwrap_err()
                .contains("no closing")
        );
        let nested = format!("{BEGIN}commands -->\n{BEGIN}synopsis -->\n{END}\n");
        assert!(find(&nested).unwrap_err().contains("not closed before"));
        assert_eq!(find(&format!("quoted: `{BEGIN}NAME -->` and `{END}`")), Ok(vec![]));
    }

    #[test]
    fn rewriting_is_idempotent_and_reports_the_stale_blocks() {
        let p = page("old table\n");
        let (new, stale) = rewrite(&p, Path::new("README.md"), &cli()).unwrap();
        let names: Vec<&str> = stale.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["policy-count", "commands"]);
        assert!(new.starts_with("# Page\n\nThere are <!-- generated: policy-count -->"));
        assert!(new.contains("| `sim run SCENARIO` |"), "{new}");
        let (again, stale) = rewrite(&new, Path::new("README.md"), &cli()).unwrap();
        assert_eq!(again, new);
        assert!(stale.is_empty());
    }

    #[test]
    fn a_new_subcommand_or_policy_changes_the_tables() {
        let cli = cli();
        let before = command_table(&cli);
        let more = cli.clone().subcommand(
            clap::Command::new("brand-new")
                .about("Does something new.")
                .arg(clap::Arg::new("file").required(true).value_name("FILE")),
        );
        let after = command_table(&more);
        assert_ne!(before, after);
        assert!(
            after.contains("| `sim brand-new FILE` | Does something new. |"),
            "{after}"
        );
        assert!(synopsis(&more).contains("\nsim brand-new FILE\n"));
        assert_eq!(subcommands(&more).count(), subcommands(&cli).count() + 1);
        let mut docs = catalogue();
        let table = policy_table(&docs, "x.md");
        assert_eq!(table.lines().count(), docs.len() + 2);
        docs.push(PolicyDoc {
            kind: "brand_new",
            source: "nowhere",
            decision: "at random",
            signals: "none",
            params: &[],
            counterparts: Vec::new(),
        });
        assert!(
            policy_table(&docs, "x.md").ends_with("| [`brand_new`](x.md#brand_new) | nowhere | at random | none |\n")
        );
    }

    #[test]
    fn every_subcommand_has_a_row_and_cells_are_escaped() {
        let cli = cli();
        let table = command_table(&cli);
        for c in subcommands(&cli) {
            assert!(
                table.contains(&format!("| `sim {}", c.get_name())),
                "no row for {}",
                c.get_name()
            );
        }
        assert!(table.contains("| `sim trace inspect FILE` |"), "{table}");
        assert!(table.contains("| `sim completions SHELL` |"), "{table}");
        assert!(synopsis(&cli).contains("\nsim completions bash|elvish|fish|powershell|zsh\n"));
        assert!(!table.contains("`sim help"));
        assert_eq!(cell("a | b\n  <c>"), "a \\| b &lt;c>");
        let c = clap::Command::new("x").about("Do it (a; b: c): then more; and more");
        assert_eq!(summary(&c), "Do it (a; b: c)");
    }

    #[test]
    fn links_are_relative_to_the_page() {
        let t = Path::new("docs/reference/policies.md");
        assert_eq!(relative(Path::new("README.md"), t), "docs/reference/policies.md");
        assert_eq!(relative(Path::new("docs/policies.md"), t), "reference/policies.md");
        assert_eq!(relative(Path::new("docs/x/y.md"), t), "../reference/policies.md");
    }
}
