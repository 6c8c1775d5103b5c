//! The printed table: each target with its measured value, its baseline and pass/short.

use std::path::Path;

pub struct Check {
    pub name: String,
    pub measured: String,
    pub target: String,
    pub pass: bool,
}

#[derive(Default)]
pub struct Report {
    pub sections: Vec<(String, Vec<String>)>,
    pub checks: Vec<Check>,
}

impl Report {
    pub fn section(&mut self, title: &str, header: &str, rows: Vec<String>) {
        let mut lines = vec![header.to_string(), separator(header)];
        lines.extend(rows);
        self.sections.push((title.to_string(), lines));
    }

    pub fn check(&mut self, name: &str, measured: String, target: &str, pass: bool) {
        self.checks.push(Check {
            name: name.to_string(),
            measured,
            target: target.to_string(),
            pass,
        });
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        out.push_str("### Targets\n\n| target | measured | goal | result |\n|---|---|---|---|\n");
        for c in &self.checks {
            let result = if c.pass { "pass" } else { "short" };
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                c.name, c.measured, c.target, result
            ));
        }
        for (title, lines) in &self.sections {
            out.push_str(&format!("\n### {title}\n\n"));
            for l in lines {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

fn separator(header: &str) -> String {
    let cols = header.matches('|').count().saturating_sub(1);
    format!("|{}", "---|".repeat(cols))
}

/// The report on stdout and into `out/results.md`, and the tally of targets on stderr.
pub fn write_results(report: &Report, out: &Path) {
    let md = report.markdown();
    println!("{md}");
    std::fs::write(out.join("results.md"), &md).expect("write results.md");
    let short = report.checks.iter().filter(|c| !c.pass).count();
    eprintln!(
        "{} targets, {} pass, {} short; results in {}",
        report.checks.len(),
        report.checks.len() - short,
        short,
        out.display()
    );
}
