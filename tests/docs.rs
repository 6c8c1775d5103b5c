//! Every `redis` session in `docs/*.md` runs here as written, each block on a fresh server:
//! lines `> COMMAND args` are sent (words split as redis-cli splits them, double quotes for
//! words with spaces), and the lines up to the next command are its reply as redis-cli prints
//! it. Two values cannot be written down exactly, so they match by kind: a fencing token
//! (an expected integer of 15 digits or more matches any such integer) and a lease counting
//! down (an expected `ttl` of N > 0 ms matches N down to N - 1000).

use std::path::Path;

use redis_lock_harness::*;

/// One command of a session and the reply the document shows.
struct Step {
    line: usize,
    words: Vec<String>,
    expected: Vec<String>,
}

fn sessions(text: &str) -> Vec<Vec<Step>> {
    let mut sessions = Vec::new();
    let mut current: Option<Vec<Step>> = None;
    for (i, line) in text.lines().enumerate() {
        match (&mut current, line.trim_end()) {
            (None, "```redis") => current = Some(Vec::new()),
            (Some(_), "```") => sessions.extend(current.take()),
            (Some(steps), line) => match line.strip_prefix("> ") {
                Some(command) => steps.push(Step {
                    line: i + 1,
                    words: split_words(command),
                    expected: Vec::new(),
                }),
                None => match steps.last_mut() {
                    Some(step) => step.expected.push(line.to_string()),
                    None => panic!("line {}: a reply before any command", i + 1),
                },
            },
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "a redis block is not closed");
    sessions
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

/// Whether a printed line matches the document's, by the two rules of the module comment.
fn matches(actual: &str, expected: &str, after_ttl: bool) -> bool {
    if actual == expected {
        return true;
    }
    let integer = |line: &str| {
        let (lead, n) = line.rsplit_once("(integer) ")?;
        Some((lead.to_string(), n.parse::<i64>().ok()?))
    };
    match (integer(actual), integer(expected)) {
        (Some((a_lead, a)), Some((e_lead, e))) if a_lead == e_lead => {
            let token = |n: i64| n >= 100_000_000_000_000;
            (token(a) && token(e)) || (after_ttl && e > 0 && (e - 1000..=e).contains(&a))
        }
        _ => false,
    }
}

fn run_session(file: &str, steps: &[Step]) {
    let server = Server::start();
    let mut con = server.con();
    for step in steps {
        let words: Vec<&str> = step.words.iter().map(String::as_str).collect();
        let actual = render(&cmd(&mut con, &words));
        let ok = actual.len() == step.expected.len()
            && actual
                .iter()
                .zip(&step.expected)
                .enumerate()
                .all(|(i, (a, e))| {
                    let after_ttl = i > 0 && step.expected[i - 1].ends_with(") ttl");
                    matches(a, e, after_ttl)
                });
        assert!(
            ok,
            "{file}:{}: {}\nthe document shows:\n{}\nthe server answered:\n{}",
            step.line,
            step.words.join(" "),
            step.expected.join("\n"),
            actual.join("\n")
        );
    }
}

#[test]
fn every_redis_session_in_the_docs_runs_as_written() {
    let docs = workspace().join("docs");
    let mut ran = 0;
    for entry in std::fs::read_dir(&docs).expect("read docs/") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
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
    assert!(matches(
        "(integer) 1796138143319999",
        "(integer) 1796138143318017",
        false
    ));
    assert!(
        !matches("(integer) 2", "(integer) 1", false),
        "small integers are exact"
    );
    assert!(matches("(integer) 29998", "(integer) 30000", true));
    assert!(!matches("(integer) 28000", "(integer) 30000", true));
}
