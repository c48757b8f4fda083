//! The documentation site (`docs/`, an mdBook, and the README): every page is in the table of
//! contents, every link between pages and to a heading resolves, and every sample is run or
//! checked by the real thing — shell commands of the `sluice` binary are parsed by it, the
//! README's tour runs against a real broker, HTTP requests are sent to one, configuration
//! files are checked by `sluice serve --check-config`, and Python samples are compiled and
//! their calls looked up in the SDK. Rust samples are compiled as doctests of the crates they
//! use (`sluice-client`, `sluice-server`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One fenced code block of a page.
struct Sample {
    page: String,
    line: usize,
    lang: String,
    text: String,
}

/// What a page holds that the tests check.
#[derive(Default)]
struct Page {
    links: Vec<(usize, String)>,
    anchors: BTreeSet<String>,
    samples: Vec<Sample>,
}

/// The README and every page under `docs/`, by path from the root.
fn pages() -> BTreeMap<String, Page> {
    let mut names = vec!["README.md".to_owned()];
    for entry in std::fs::read_dir(root().join("docs")).expect("docs/") {
        let name = entry
            .expect("entry")
            .file_name()
            .into_string()
            .expect("utf-8");
        if name.ends_with(".md") {
            names.push(format!("docs/{name}"));
        }
    }
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(root().join(&name)).expect("page");
            let page = parse(&name, &text);
            (name, page)
        })
        .collect()
}

/// The anchor mdBook (and GitHub) give a heading: lower case, spaces to hyphens, other
/// punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_lowercase().next()?),
            _ => None,
        })
        .collect()
}

fn parse(name: &str, text: &str) -> Page {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut page = Page::default();
    let mut heading: Option<String> = None;
    let mut block: Option<(usize, String, String)> = None;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_insert(0);
                page.anchors.insert(if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                });
                *n += 1;
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                page.links
                    .push((line_of(range.start), dest_url.to_string()));
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => info.to_string(),
                    CodeBlockKind::Indented => "indented".to_owned(),
                };
                block = Some((line_of(range.start), lang, String::new()));
            }
            Event::End(TagEnd::CodeBlock) => {
                let (line, lang, text) = block.take().expect("a block ends after it starts");
                page.samples.push(Sample {
                    page: name.to_owned(),
                    line,
                    lang,
                    text,
                });
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
                if let Some((_, _, b)) = block.as_mut() {
                    b.push_str(&t);
                }
            }
            _ => {}
        }
    }
    page
}

#[test]
fn the_table_of_contents_lists_every_page_once() {
    let pages = pages();
    let summary = &pages["docs/SUMMARY.md"];
    let listed: Vec<String> = summary
        .links
        .iter()
        .map(|(_, l)| format!("docs/{l}"))
        .collect();
    let unique: BTreeSet<&String> = listed.iter().collect();
    assert_eq!(
        unique.len(),
        listed.len(),
        "a page is listed twice: {listed:?}"
    );
    let all: BTreeSet<&String> = pages
        .keys()
        .filter(|p| p.starts_with("docs/") && *p != "docs/SUMMARY.md")
        .collect();
    let missing: Vec<_> = all.difference(&unique).collect();
    let unknown: Vec<_> = unique.difference(&all).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/SUMMARY.md must list every page under docs/: missing {missing:?}, unknown {unknown:?}"
    );
}

#[test]
fn every_link_between_pages_resolves() {
    let pages = pages();
    let mut broken = Vec::new();
    let mut checked = 0;
    for (name, page) in &pages {
        let dir = Path::new(name).parent().expect("a directory");
        for (line, link) in &page.links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if path.is_empty() {
                name.clone()
            } else {
                normalize(&dir.join(path))
            };
            if !root().join(&target).exists() {
                broken.push(format!("{name}:{line}: {link} (no file {target})"));
                continue;
            }
            if !anchor.is_empty() {
                match pages.get(&target) {
                    Some(t) if t.anchors.contains(anchor) => {}
                    Some(_) => broken.push(format!("{name}:{line}: {link} (no such heading)")),
                    None => broken.push(format!("{name}:{line}: {link} (not a page)")),
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} links found: is the parser reading the pages?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `docs/../README.md` as `README.md`.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.to_str().expect("utf-8").split('/') {
        match part {
            "." | "" => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// Every sample of every page.
fn samples() -> Vec<Sample> {
    pages().into_values().flat_map(|p| p.samples).collect()
}

/// What each language of sample is, so that none goes unchecked by being unlabelled.
const LANGUAGES: [&str; 8] = [
    "sh", "python", "toml", "text", "rust", "http", "json", "yaml",
];

#[test]
fn every_sample_says_its_language() {
    let unlabelled: Vec<String> = samples()
        .iter()
        .filter(|s| !LANGUAGES.contains(&s.lang.split(',').next().unwrap_or("")))
        .map(|s| format!("{}:{} ```{}", s.page, s.line, s.lang))
        .collect();
    assert!(
        unlabelled.is_empty(),
        "label each code block with one of {LANGUAGES:?} (`text` for output and diagrams):\n{}",
        unlabelled.join("\n")
    );
}

/// Splits a shell line into words as `sh` does for the quoting the docs use (single and
/// double quotes, backslash escapes), dropping a comment; control operators (`|`, `&&`,
/// `;`, redirections) come out as words of their own.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    w.push(c);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => w.extend(chars.next()),
                        c => w.push(c),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            '#' if word.is_none() => break,
            c if c.is_whitespace() => words.extend(word.take()),
            '|' | ';' | '&' | '<' | '>' => {
                words.extend(word.take());
                let mut op = c.to_string();
                while let Some(&n) = chars.peek() {
                    if matches!(n, '|' | '&' | '>') {
                        op.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                words.push(op);
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The `sluice` invocations of a shell sample: each command of each line (continuations
/// joined) that runs the binary, as its arguments.
fn sluice_commands(text: &str) -> Vec<Vec<String>> {
    let joined = text.replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines() {
        let words = shell_words(line);
        // After a `cd`, `cargo run` builds some other crate.
        let mut elsewhere = false;
        for command in words.split(|w| matches!(w.as_str(), "|" | "||" | "&&" | ";" | "&")) {
            // Variables set for the one command (`VAR=value sluice …`) are not arguments.
            let skip = command
                .iter()
                .take_while(|w| w.split_once('=').is_some_and(|(k, _)| is_variable(k)))
                .count();
            let command = &command[skip..];
            if command.first().is_some_and(|w| w == "cd" || w == "(cd") {
                elsewhere = true;
            }
            // A redirection ends the arguments.
            let end = command
                .iter()
                .position(|w| w.starts_with('<') || w.starts_with('>'))
                .unwrap_or(command.len());
            let command = &command[..end];
            let args = match command {
                [first, rest @ ..] if first == "sluice" || first.ends_with("/sluice") => rest,
                [cargo, run, rest @ ..] if cargo == "cargo" && run == "run" && !elsewhere => {
                    match rest.iter().position(|w| w == "--") {
                        Some(i) if !rest.iter().any(|w| w == "-p") => &rest[i + 1..],
                        _ => continue,
                    }
                }
                _ => continue,
            };
            // Shell variables and substitutions are the reader's to fill in.
            if args.iter().any(|w| w.contains('$')) {
                continue;
            }
            out.push(args.to_vec());
        }
    }
    out
}

/// A shell variable's name: `SLUICE_URL`, `bin`.
fn is_variable(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Pages whose commands are records of past runs, made with the binary of their day: their
/// links are checked, their commands are not.
const RECORDS: [&str; 1] = ["docs/benchmark-history.md"];

#[test]
fn every_sluice_command_in_the_docs_parses() {
    let mut failed = Vec::new();
    let mut checked = 0;
    let current = |s: &&Sample| s.lang == "sh" && !RECORDS.contains(&s.page.as_str());
    for sample in samples().iter().filter(current) {
        for args in sluice_commands(&sample.text) {
            checked += 1;
            // `--help` after the arguments makes the binary parse them (names, values, the
            // subcommand path) and stop before doing anything.
            let out = common::sluice()
                .args(&args)
                .arg("--help")
                .stdin(Stdio::null())
                .output()
                .expect("run sluice");
            if !out.status.success() {
                failed.push(format!(
                    "{}:{}: sluice {}\n{}",
                    sample.page,
                    sample.line,
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} sluice commands found in the docs"
    );
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

#[test]
fn the_configuration_samples_are_accepted_by_check_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The samples name a deployment's files and leave secrets to the reader: the test puts
    // real ones in their place, so that the check reads every setting.
    let ca = common::ca::Ca::new(dir.path(), "ca");
    ca.sign("cert", &["localhost"]);
    let fill = |text: &str| {
        text.replace("/etc/sluice/tls/cert.pem", &path_of(&ca.path("cert")))
            .replace("/etc/sluice/tls/key.pem", &path_of(&ca.path("cert-key")))
            .replace("/var/lib/sluice", &path_of(&dir.path().join("data")))
            .replace(
                "sha256 = \"…\"",
                &format!("sha256 = \"{}\"", "ab".repeat(32)),
            )
            .replace(
                "secret_access_key = \"…\"",
                "secret_access_key = \"a secret\"",
            )
    };
    let mut checked = 0;
    for sample in samples().iter().filter(|s| s.lang == "toml") {
        checked += 1;
        let file = dir.path().join(format!("sample-{checked}.toml"));
        std::fs::write(&file, fill(&sample.text)).expect("write");
        let out = common::sluice()
            .args(["serve", "--check-config", "--config"])
            .arg(&file)
            .output()
            .expect("run sluice");
        assert!(
            out.status.success(),
            "{}:{}: sluice serve --check-config refused the sample:\n{}",
            sample.page,
            sample.line,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(checked >= 3, "only {checked} configuration samples found");
}

fn path_of(p: &Path) -> String {
    p.to_str().expect("a UTF-8 path").to_owned()
}

#[test]
fn the_python_samples_compile_and_call_what_the_sdk_has() {
    // The SDK needs nothing beyond the standard library; the suite's venv if there is one.
    let venv = root().join("python/.venv/bin/python");
    let python = if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    };
    let samples: Vec<Sample> = samples()
        .into_iter()
        .filter(|s| s.lang == "python")
        .collect();
    assert!(samples.len() >= 10, "only {} Python samples", samples.len());
    // Each sample compiled; each `sluice.X`, `client.x(`, `worker.x` looked up in the SDK.
    let check = r#"
import importlib.util, json, re, sys
import sluice
failed = []
for s in json.load(sys.stdin):
    where = f"{s['page']}:{s['line']}"
    try:
        compile(s["text"], where, "exec")
    except SyntaxError as e:
        failed.append(f"{where}: {e}")
        continue
    for name in re.findall(r"\bsluice\.([A-Za-z_]\w*)", s["text"]):
        if not hasattr(sluice, name) and importlib.util.find_spec(f"sluice.{name}") is None:
            failed.append(f"{where}: sluice.{name} does not exist")
    for obj, cls in (("client", sluice.Client), ("worker", sluice.Worker)):
        for name in re.findall(rf"\b{obj}\.([A-Za-z_]\w*)", s["text"]):
            if not hasattr(cls, name):
                failed.append(f"{where}: {cls.__name__}.{name} does not exist")
print("\n".join(failed))
sys.exit(1 if failed else 0)
"#;
    let input: Vec<serde_json::Value> = samples
        .iter()
        .map(|s| serde_json::json!({"page": s.page, "line": s.line, "text": s.text}))
        .collect();
    let mut child = Command::new(&python)
        .args(["-c", check])
        .env("PYTHONPATH", root().join("python/src"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run python");
    std::io::Write::write_all(
        &mut child.stdin.take().expect("stdin"),
        serde_json::to_string(&input).expect("json").as_bytes(),
    )
    .expect("write");
    let out = child.wait_with_output().expect("python");
    assert!(
        out.status.success(),
        "Python samples:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The shell block that follows `heading` on `page`.
fn block_after(page: &str, heading: &str) -> String {
    let text = std::fs::read_to_string(root().join(page)).expect("page");
    let at = text
        .find(heading)
        .unwrap_or_else(|| panic!("{page} has {heading:?}"));
    let start = text[at..].find("```sh\n").expect("a shell block") + at + 6;
    let end = text[start..].find("```").expect("its end") + start;
    text[start..end].to_owned()
}

/// Runs `script` in bash with `sluice` and `curl` pointing at `url`, failing on the first
/// command that fails (for curl: any answer that is not 2xx).
fn run_script(script: &str, url: &str) -> std::process::Output {
    let prelude = format!(
        r#"set -euo pipefail
export SLUICE_URL={url}
sluice() {{ "{bin}" "$@"; }}
curl() {{
  local args=() a code
  for a in "$@"; do args+=("${{a//localhost:7878/{host}}}"); done
  code=$(command curl -sS -o /dev/null -w '%{{http_code}}' "${{args[@]}}")
  [[ $code == 2* ]] || {{ echo "HTTP $code from curl $*" >&2; return 1; }}
}}
"#,
        bin = common::BIN,
        host = url.trim_start_matches("http://"),
    );
    Command::new("bash")
        .arg("-c")
        .arg(format!("{prelude}{script}"))
        .output()
        .expect("bash")
}

#[test]
fn the_readme_tour_runs_against_a_real_broker() {
    // Lines that settle "…" receipts or look up "<id>" are templates for the reader.
    let template = |l: &&str| !(l.contains('…') || l.contains("<id>"));
    let with_curl = block_after("README.md", "### With curl");
    let with_curl: Vec<&str> = with_curl.lines().filter(template).collect();
    let with_cli = block_after("README.md", "### With the command line");
    // The alias is how a reader without `sluice` on the PATH runs it; the test has the binary.
    let with_cli: Vec<&str> = with_cli
        .lines()
        .filter(|l| !l.starts_with("alias "))
        .collect();
    // The two tours are alternatives: each starts from a new broker.
    for (name, script) in [("curl", with_curl), ("command line", with_cli)] {
        let broker = common::broker();
        let out = run_script(&script.join("\n"), &broker.url);
        assert!(
            out.status.success(),
            "the README's tour {name} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let stats = common::sluice()
            .args(["stats", "jobs", "--json", "--url", &broker.url])
            .output()
            .expect("stats");
        let stats: serde_json::Value =
            serde_json::from_slice(&stats.stdout).expect("stats as JSON");
        let sent = stats["totals"]["sent"].as_u64().unwrap_or(0);
        assert!(sent >= 3, "the {name} tour sent its tasks: {stats}");
    }
}

#[tokio::test]
async fn the_http_samples_are_answered_2xx_by_a_real_broker() {
    let broker = common::broker();
    let client = reqwest::Client::new();
    let mut sent = 0;
    for sample in samples().iter().filter(|s| s.lang == "http") {
        let (request, body) = sample.text.split_once('\n').unwrap_or((&sample.text, ""));
        let (method, path) = request.split_once(' ').expect("METHOD /path");
        let body: serde_json::Value = if body.trim().is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(body).unwrap_or_else(|e| {
                panic!("{}:{}: the body is not JSON: {e}", sample.page, sample.line)
            })
        };
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let resp = client
            .request(method, format!("{}{path}", broker.url))
            .json(&body)
            .send()
            .await
            .expect("request");
        let status = resp.status();
        assert!(
            status.is_success(),
            "{}:{}: {status} {}",
            sample.page,
            sample.line,
            resp.text().await.unwrap_or_default()
        );
        sent += 1;
    }
    assert!(sent >= 1, "no HTTP samples found");
    for sample in samples().iter().filter(|s| s.lang == "json") {
        serde_json::from_str::<serde_json::Value>(&sample.text)
            .unwrap_or_else(|e| panic!("{}:{}: not JSON: {e}", sample.page, sample.line));
    }
}

/// The one YAML the docs show is the Patroni configuration the failover test runs with, so
/// what they recommend is what was measured.
#[test]
fn the_patroni_settings_shown_are_the_failover_tests() {
    let yaml: Vec<Sample> = samples().into_iter().filter(|s| s.lang == "yaml").collect();
    assert_eq!(yaml.len(), 1, "one YAML sample, in postgres-ha.md");
    assert_eq!(
        yaml[0].text,
        sluice_testkit::patroni::DCS,
        "{}:{}: not the settings of sluice_testkit::patroni",
        yaml[0].page,
        yaml[0].line
    );
}

#[test]
fn shell_words_split_as_sh_does() {
    assert_eq!(
        shell_words(r#"sluice send jobs '{"a": 1}' --x "b c" # note"#),
        ["sluice", "send", "jobs", r#"{"a": 1}"#, "--x", "b c"]
    );
    assert_eq!(
        shell_words("seq 1 3 | sluice send jobs - > out"),
        [
            "seq", "1", "3", "|", "sluice", "send", "jobs", "-", ">", "out"
        ]
    );
    assert_eq!(
        sluice_commands("cargo run --release -q -- stats jobs && sluice queue list # all\n"),
        [vec!["stats", "jobs"], vec!["queue", "list"]]
    );
}

#[test]
fn the_book_builds() {
    let Ok(version) = Command::new("mdbook").arg("--version").output() else {
        common::skip_or_fail(
            "mdbook is not installed: `cargo install --locked mdbook` (`.ci/run` does) to build \
             the documentation site",
        );
        return;
    };
    assert!(version.status.success(), "mdbook --version failed");
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new("mdbook")
        .arg("build")
        .arg(root().join("docs"))
        .arg("--dest-dir")
        .arg(out_dir.path())
        .output()
        .expect("mdbook build");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mdbook build docs failed:\n{log}");
    // mdBook logs what it could not resolve (an include, a missing chapter) as warnings.
    assert!(!log.contains("WARN") && !log.contains("ERROR"), "{log}");
    for page in [
        "index.html",
        "dlq-guide.html",
        "benchmarks.html",
        "testing.html",
    ] {
        assert!(out_dir.path().join(page).exists(), "the book has no {page}");
    }
}
