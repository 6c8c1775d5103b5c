//! Every `redis` session in the README and `docs/*.md` runs here as written, each block on a
//! fresh server: lines `> COMMAND args` are sent (words split as redis-cli splits them, double
//! quotes for words with spaces), and the lines up to the next command are its reply as
//! redis-cli prints it. Two values cannot be written down exactly, so they match by kind: a
//! fencing token (an expected integer of 15 digits or more matches any such integer) and the
//! time of a lease (an expected `ttl` of N > 0 ms matches N down to N - 1000, a `held` of N
//! matches N up to N + 1000).
//!
//! A token a reply shows stands for the token the server gave in its place wherever a later
//! command uses it (`LOCK.FENCE key <token>`), and a quoted UUID (a generated owner) matches
//! any UUID. A `LOCK.WATCH` cursor, `"<token>-<holders>"`, matches by its token the same way.
//! Text after two spaces and `#` on a command line is a comment.
//!
//! Sessions of several clients name each one: `A> ...`, `B> ...` (`> ` is `A`). A command that
//! blocks is followed by `B… (blocks)`; its reply comes later, as `B… <reply>` where the
//! session shows it arriving.

use std::collections::HashMap;
use std::path::Path;
use std::thread::JoinHandle;

use redis_lock_harness::*;

/// One line of a session: a command sent, or the late reply of a blocked one.
struct Step {
    line: usize,
    client: char,
    /// The command's words; empty for a late reply.
    words: Vec<String>,
    /// Sent without reading the reply (`X… (blocks)`).
    blocks: bool,
    expected: Vec<String>,
}

fn sessions(text: &str) -> Vec<Vec<Step>> {
    let mut sessions = Vec::new();
    let mut current: Option<Vec<Step>> = None;
    for (i, line) in text.lines().enumerate() {
        match (&mut current, line.trim_end()) {
            (None, "```redis") => current = Some(Vec::new()),
            (Some(_), "```") => sessions.extend(current.take()),
            (Some(steps), line) => parse_line(steps, i + 1, line),
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "a redis block is not closed");
    sessions
}

/// `line` (number `at`) of a session: a command, a late reply, or a line of the last reply.
fn parse_line(steps: &mut Vec<Step>, at: usize, line: &str) {
    let mut chars = line.chars();
    let (client, rest) = match (chars.next(), chars.as_str()) {
        (Some(c), rest)
            if c.is_ascii_uppercase() && (rest.starts_with("> ") || rest.starts_with('…')) =>
        {
            (c, rest)
        }
        _ => ('A', line),
    };
    let step = |words, expected| Step {
        line: at,
        client,
        words,
        blocks: false,
        expected,
    };
    if let Some(command) = rest.strip_prefix("> ") {
        let command = command.split("  #").next().unwrap_or(command);
        steps.push(step(split_words(command), Vec::new()));
    } else if let Some(reply) = rest.strip_prefix('…').map(str::trim_start) {
        let last = steps
            .iter_mut()
            .rev()
            .find(|s| s.client == client && !s.words.is_empty());
        match (reply, last) {
            ("(blocks)", Some(last)) => last.blocks = true,
            (_, Some(_)) => steps.push(step(Vec::new(), vec![reply.to_string()])),
            (_, None) => panic!("line {at}: {client} has sent nothing"),
        }
    } else {
        match steps.last_mut() {
            Some(step) => step.expected.push(line.to_string()),
            None => panic!("line {at}: a reply before any command"),
        }
    }
}

fn split_words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for ch in command.chars() {
        match ch {
            '"' => quoted = !quoted,
            ' ' if !quoted => words.extend((!word.is_empty()).then(|| std::mem::take(&mut word))),
            ch => word.push(ch),
        }
    }
    words.extend((!word.is_empty()).then_some(word));
    words
}

/// A reply as redis-cli prints it (RESP2), one line per element.
fn render(reply: &Result<Value, String>) -> Vec<String> {
    match reply {
        Err(e) => vec![format!("(error) {e}")],
        Ok(Value::Array(items)) if items.is_empty() => vec!["(empty array)".into()],
        Ok(Value::Array(items)) => {
            let width = items.len().to_string().len();
            let mut lines = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let number = format!("{:>width$}) ", i + 1);
                for (j, line) in render(&Ok(item.clone())).into_iter().enumerate() {
                    let lead = if j == 0 {
                        number.clone()
                    } else {
                        " ".repeat(number.len())
                    };
                    lines.push(format!("{lead}{line}"));
                }
            }
            lines
        }
        Ok(value) => vec![scalar(value)],
    }
}

fn scalar(value: &Value) -> String {
    match value {
        Value::Nil => "(nil)".into(),
        Value::Int(n) => format!("(integer) {n}"),
        Value::Okay => "OK".into(),
        Value::SimpleString(s) => s.clone(),
        Value::BulkString(b) => format!("\"{}\"", String::from_utf8_lossy(b)),
        other => format!("{other:?}"),
    }
}

/// A lease's time in a reply, by the field named on the line before: it runs while the session
/// runs.
#[derive(Clone, Copy, PartialEq)]
enum Clock {
    None,
    /// `ttl`: counts down.
    Left,
    /// `held`: counts up.
    Held,
}

fn clock_after(previous: Option<&String>) -> Clock {
    match previous {
        Some(line) if line.ends_with(") ttl") => Clock::Left,
        Some(line) if line.ends_with(") held") => Clock::Held,
        _ => Clock::None,
    }
}

fn is_uuid(text: &str) -> bool {
    let dashes = [8, 13, 18, 23];
    text.len() == 36
        && text.char_indices().all(|(i, c)| {
            if dashes.contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// Whether a printed line matches the document's, by the rules of the module comment.
fn matches(actual: &str, expected: &str, clock: Clock) -> bool {
    if actual == expected {
        return true;
    }
    let quoted = |line: &str| {
        let (lead, rest) = line.split_once('"')?;
        Some((lead.to_string(), rest.strip_suffix('"')?.to_string()))
    };
    if let (Some((a_lead, a)), Some((e_lead, e))) = (quoted(actual), quoted(expected)) {
        let cursors = matches!((cursor(&a), cursor(&e)), (Some(a), Some(e)) if a.1 == e.1);
        return a_lead == e_lead && (is_uuid(&a) && is_uuid(&e) || cursors);
    }
    let integer = |line: &str| {
        let (lead, n) = line.rsplit_once("(integer) ")?;
        Some((lead.to_string(), n.parse::<i64>().ok()?))
    };
    match (integer(actual), integer(expected)) {
        (Some((a_lead, a)), Some((e_lead, e))) if a_lead == e_lead => {
            let token = |n: i64| n >= 100_000_000_000_000;
            let counted = match clock {
                Clock::Left => e > 0 && (e - 1000..=e).contains(&a),
                Clock::Held => (e..=e + 1000).contains(&a),
                Clock::None => false,
            };
            (token(a) && token(e)) || counted
        }
        _ => false,
    }
}

/// A `LOCK.WATCH` cursor `<token>-<holders>` whose token is a real one (15 digits or more).
fn cursor(text: &str) -> Option<(&str, &str)> {
    let (token, holders) = text.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (token.len() >= 15 && digits(token) && digits(holders)).then_some((token, holders))
}

/// A word of a command with the document's tokens (bare, or in a cursor) replaced by the
/// server's.
fn with_tokens(word: &str, tokens: &HashMap<String, String>) -> String {
    if let Some(token) = tokens.get(word) {
        return token.clone();
    }
    match cursor(word) {
        Some((token, holders)) if tokens.contains_key(token) => {
            format!("{}-{holders}", tokens[token])
        }
        _ => word.to_string(),
    }
}

/// Whether the printed reply is the one the document shows.
fn same_reply(actual: &[String], expected: &[String]) -> bool {
    actual.len() == expected.len()
        && actual.iter().zip(expected).enumerate().all(|(i, (a, e))| {
            let previous = i.checked_sub(1).and_then(|p| expected.get(p));
            matches(a, e, clock_after(previous))
        })
}

type Pending = JoinHandle<(Connection, Result<Value, String>)>;

/// The tokens of the document's replies, each with the one the server gave in its place.
fn learn_tokens(actual: &[String], expected: &[String], tokens: &mut HashMap<String, String>) {
    let number = |line: &str| line.rsplit_once("(integer) ").map(|(_, n)| n.to_string());
    let quoted_cursor = |line: &str| {
        let inner = line.split_once('"')?.1.strip_suffix('"')?;
        cursor(inner).map(|(token, _)| token.to_string())
    };
    for (a, e) in actual.iter().zip(expected) {
        if let (Some(a), Some(e)) = (quoted_cursor(a), quoted_cursor(e)) {
            tokens.insert(e, a);
        }
        if let (Some(a), Some(e)) = (number(a), number(e)) {
            if e.len() >= 15 {
                tokens.insert(e, a);
            }
        }
    }
}

fn run_session(file: &str, steps: &[Step]) {
    let server = Server::start();
    let mut watcher = server.con();
    let mut cons: HashMap<char, Connection> = HashMap::new();
    let mut pending: HashMap<char, Pending> = HashMap::new();
    let mut tokens: HashMap<String, String> = HashMap::new();
    for step in steps {
        let reply = if step.words.is_empty() {
            let waiting = pending.remove(&step.client);
            let (con, reply) = waiting
                .expect("a blocked command")
                .join()
                .expect("no panic");
            cons.insert(step.client, con);
            reply
        } else {
            let mut con = cons.remove(&step.client).unwrap_or_else(|| server.con());
            let words: Vec<String> = step.words.iter().map(|w| with_tokens(w, &tokens)).collect();
            let send = move || {
                let words: Vec<&str> = words.iter().map(String::as_str).collect();
                let reply = cmd(&mut con, &words);
                (con, reply)
            };
            if step.blocks {
                pending.insert(step.client, std::thread::spawn(send));
                wait_blocked(&mut watcher, pending.len() as i64);
                continue;
            }
            let (con, reply) = send();
            cons.insert(step.client, con);
            reply
        };
        let actual = render(&reply);
        learn_tokens(&actual, &step.expected, &mut tokens);
        assert!(
            same_reply(&actual, &step.expected),
            "{file}:{}: {}{}\nthe document shows:\n{}\nthe server answered:\n{}",
            step.line,
            step.client,
            if step.words.is_empty() {
                "… (its late reply)".to_string()
            } else {
                format!("> {}", step.words.join(" "))
            },
            step.expected.join("\n"),
            actual.join("\n")
        );
    }
    assert!(
        pending.is_empty(),
        "{file}: a blocked command's reply is never shown"
    );
}

#[test]
fn every_redis_session_in_the_docs_runs_as_written() {
    let mut ran = 0;
    for path in pages() {
        let text = std::fs::read_to_string(&path).expect("read a doc");
        let name = path
            .file_name()
            .map(Path::new)
            .unwrap_or(&path)
            .display()
            .to_string();
        for steps in sessions(&text) {
            run_session(&name, &steps);
            ran += 1;
        }
    }
    assert!(ran >= 3, "only {ran} sessions found");
}

#[test]
fn the_runner_reads_and_prints_as_redis_cli() {
    assert_eq!(split_words(r#"SET k "a b" NX"#), ["SET", "k", "a b", "NX"]);
    let reply = Ok(Value::Array(vec![
        Value::SimpleString("mode".into()),
        Value::BulkString(b"alice".to_vec()),
        Value::Array(vec![]),
        Value::Int(7),
    ]));
    assert_eq!(
        render(&reply),
        [
            "1) mode",
            "2) \"alice\"",
            "3) (empty array)",
            "4) (integer) 7"
        ]
    );
    let token = matches(
        "(integer) 1796138143319999",
        "(integer) 1796138143318017",
        Clock::None,
    );
    assert!(token, "any token for a token");
    let small = matches("(integer) 2", "(integer) 1", Clock::None);
    assert!(!small, "small integers are exact");
    assert!(matches("(integer) 29998", "(integer) 30000", Clock::Left));
    assert!(!matches("(integer) 28000", "(integer) 30000", Clock::Left));
    assert!(matches(" 8) (integer) 3", " 8) (integer) 0", Clock::Held));
    let uuid = "1) \"c8da1ac0-7ca9-47cd-9c1d-6b15664da53b\"";
    assert!(matches(
        "1) \"00000000-7ca9-47cd-9c1d-6b15664da53b\"",
        uuid,
        Clock::None
    ));
    assert!(!matches("1) \"alice\"", uuid, Clock::None));
    let session = [
        "A> GET k",
        "(nil)",
        "B> BLPOP q 0",
        "B… (blocks)",
        "A> RPUSH q x",
        "(integer) 1",
        "B… 1) \"q\"",
        "2) \"x\"",
    ];
    let mut steps = Vec::new();
    for (i, line) in session.iter().enumerate() {
        parse_line(&mut steps, i + 1, line);
    }
    let shape: Vec<(char, usize, bool, usize)> = steps
        .iter()
        .map(|s| (s.client, s.words.len(), s.blocks, s.expected.len()))
        .collect();
    let expected = [
        ('A', 2, false, 1),
        ('B', 3, true, 0),
        ('A', 3, false, 1),
        ('B', 0, false, 2),
    ];
    assert_eq!(shape, expected);
}

/// A Go snippet in the README or docs is the code of an `Example` of the Go client
/// (`clients/go/example_test.go`), which `go test` runs and checks against its `// Output:`.
#[test]
fn every_go_snippet_is_a_run_example() {
    let root = workspace();
    let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let examples = std::fs::read_to_string(root.join("clients/go/example_test.go"))
        .expect("read example_test.go");
    let examples = squeeze(&examples);
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read a page");
        for block in blocks(&text, "go") {
            let snippet = squeeze(&block.join("\n"));
            assert!(
                examples.contains(&snippet),
                "{}: this Go snippet is not the code of an Example in clients/go/example_test.go:\n{}",
                page.display(),
                block.join("\n")
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "the READMEs' Go examples are checked");
}

/// The README, `docs/*.md`, the changelog and the clients' READMEs.
pub(crate) fn pages() -> Vec<std::path::PathBuf> {
    let root = workspace();
    let mut pages = vec![root.join("README.md")];
    pages.extend(
        ["CHANGELOG.md"]
            .map(|p| root.join(p))
            .into_iter()
            .filter(|p| p.exists()),
    );
    for dir in [
        "docs",
        "clients/python",
        "clients/rust",
        "clients/node",
        "clients/go",
        "clients/java",
    ] {
        for entry in std::fs::read_dir(root.join(dir)).expect("read a docs dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

/// The relative links `[text](target)` of a markdown text, outside code.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = &after[..end];
            if !target.contains("://") && !target.starts_with("mailto:") {
                found.push(target.to_string());
            }
            rest = &after[end..];
        }
    }
    found
}

#[test]
fn every_link_in_the_docs_leads_somewhere() {
    let mut broken = Vec::new();
    for page in &pages() {
        let text = std::fs::read_to_string(page).expect("read a page");
        for link in links(&text) {
            let (file, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a dir").join(file)
            };
            let ok = target.exists()
                && (fragment.is_empty()
                    || std::fs::read_to_string(&target)
                        .map(|t| anchors(&t).iter().any(|a| a == fragment))
                        .unwrap_or(false));
            if !ok {
                broken.push(format!("{}: {link}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The words of a command's arguments in COMMAND DOCS: each keyword, and each value's name.
fn documented_words(doc: &Value) -> Vec<String> {
    let text = |v: Option<Value>| match v {
        Some(Value::BulkString(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
        Some(Value::SimpleString(s)) => Some(s),
        _ => None,
    };
    let Some(Value::Array(args)) = map_field(doc, "arguments") else {
        return Vec::new();
    };
    let mut words = Vec::new();
    for arg in &args {
        words.extend(text(map_field(arg, "token")));
        if text(map_field(arg, "type")).as_deref() != Some("pure-token") {
            words.extend(text(map_field(arg, "name")));
        }
    }
    words.sort();
    words
}

/// Each command's synopsis in docs/commands.md (the block under its heading, one line per form,
/// `-> ...` describing the reply) names exactly the arguments the server documents in COMMAND
/// DOCS.
#[test]
fn the_command_reference_synopses_match_command_docs() {
    let text = std::fs::read_to_string(workspace().join("docs/commands.md")).expect("read");
    let mut shown: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("## LOCK.") {
            continue;
        }
        let block = lines.by_ref().skip_while(|l| !l.starts_with("```")).skip(1);
        for form in block.take_while(|l| !l.starts_with("```")) {
            let form = form.split("->").next().unwrap_or(form);
            let mut words = form
                .split(|ch: char| ch.is_whitespace() || "[]|".contains(ch))
                .filter(|w| !w.is_empty() && *w != "...");
            let Some(name) = words.next() else { continue };
            let entry = shown.entry(name.to_lowercase()).or_default();
            entry.extend(words.map(String::from));
            entry.sort();
            entry.dedup();
        }
    }
    let s = Server::start();
    let mut c = s.con();
    for (command, words) in &shown {
        let docs = ok(&mut c, &["COMMAND", "DOCS", command]);
        let doc =
            map_field(&docs, command).unwrap_or_else(|| panic!("no COMMAND DOCS for {command}"));
        let mut documented = documented_words(&doc);
        documented.dedup();
        assert_eq!(
            words, &documented,
            "docs/commands.md: the synopsis of {command}"
        );
    }
    let registered = match ok(
        &mut c,
        &["COMMAND", "LIST", "FILTERBY", "PATTERN", "lock.*"],
    ) {
        Value::Array(names) => names,
        other => panic!("{other:?}"),
    };
    // LOCK.DEBUG exists in debug builds only, and is documented apart.
    let mut registered: Vec<String> = registered
        .iter()
        .map(|n| redis_lock_harness::text(n).to_lowercase())
        .filter(|n| n != "lock.debug")
        .collect();
    registered.sort();
    assert_eq!(
        shown.keys().cloned().collect::<Vec<_>>(),
        registered,
        "every command has a synopsis"
    );
}

/// The fenced blocks of `lang` (its first word after the fence) in a markdown text, but for
/// the blocks right after an `<!-- install-test: NAME -->` marker: a client's install test
/// (`scripts/install/<client>.sh`) runs those as written, in a fresh project.
fn blocks<'a>(text: &'a str, lang: &str) -> Vec<Vec<&'a str>> {
    let mut found = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    let mut after_marker = false;
    for line in text.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) if info.split([',', ' ']).next() == Some(lang) && !after_marker => {
                current = Some(Vec::new())
            }
            (Some(_), Some("")) => found.extend(current.take()),
            (Some(block), _) => block.push(line),
            (None, _) => {}
        }
        if current.is_none() && !line.trim().is_empty() {
            after_marker = line.trim_start().starts_with("<!-- install-test:");
        }
    }
    found
}

/// A Rust snippet in the README or docs that is not compiled where it stands (`rust,ignore`) is
/// copied from a doctest of the Rust client, which `make test` compiles.
#[test]
fn every_rust_snippet_is_a_compiled_doctest() {
    let root = workspace();
    let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let lib = std::fs::read_to_string(root.join("clients/rust/src/lib.rs")).expect("read lib.rs");
    let doctests: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .filter(|l| !l.starts_with("# "))
        .collect();
    let doctests = squeeze(&doctests.join("\n"));
    let mut checked = 0;
    for page in pages() {
        if page.starts_with(root.join("clients/rust")) {
            continue; // its README is itself a doctest (ReadmeDoctests)
        }
        let text = std::fs::read_to_string(&page).expect("read a page");
        for block in blocks(&text, "rust") {
            let snippet = squeeze(&block.join("\n"));
            assert!(
                doctests.contains(&snippet),
                "{}: this Rust snippet is not a doctest of clients/rust/src/lib.rs:\n{}",
                page.display(),
                block.join("\n")
            );
            checked += 1;
        }
    }
    assert!(checked >= 1, "the README's Rust example is checked");
}
