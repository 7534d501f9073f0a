//! The server's log as an operator reads it: `gradless serve` with stderr in a file (as
//! under systemd, a pipe or CI) writes no ANSI escape codes, `--log-format json` writes one
//! JSON object per line, and a run's lines carry its id (the `run` span), the device
//! thread's included.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `gradless serve` process, stopped when dropped (also when a test fails).
struct Server {
    child: Child,
    log: PathBuf,
    port: u16,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    /// Starts `gradless serve ARGS` on a free loopback port, stderr into a file, with a
    /// terminal-looking environment (`TERM` set, `NO_COLOR` unset): only stderr's being a
    /// file may decide against colour.
    fn start(name: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = std::env::temp_dir().join(format!("gradless-logs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("stderr.log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_gradless"));
        command
            .args([
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--default-threads",
                "1",
                "--db",
                ":memory:",
            ])
            .args(args)
            .env_remove("NO_COLOR")
            .env_remove("GRADLESS_LOG_FORMAT")
            .env("TERM", "xterm-256color")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command.spawn().expect("start gradless serve");
        let mut server = Server {
            child,
            log,
            port: 0,
            dir,
        };
        let port = server.wait_for(|text| {
            let at = text.find("serving at http://127.0.0.1:")?;
            let rest = &text[at + "serving at http://127.0.0.1:".len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u16>().ok()
        });
        server.port = port;
        server
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// Polls the log until `found` finds something in it (60 s at most).
    fn wait_for<T>(&mut self, found: impl Fn(&str) -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            let text = self.text();
            if let Some(t) = found(&text) {
                return t;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("gradless serve exited ({status}); its log:\n{text}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "not in the log within 60 s:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs a tiny model to its end over the API and returns the run's id.
    fn run_one(&self) -> String {
        let spec = r#"{"model": "tiny_mlp", "batch": 2, "warmup": 1, "iters": 2}"#;
        let answer = common::exchange(
            self.port,
            &format!(
                "POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{spec}",
                self.port,
                spec.len()
            ),
            "}",
            Duration::from_secs(60),
        );
        assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
        let body = answer.split("\r\n\r\n").nth(1).unwrap();
        let created: protocol::RunCreated = serde_json::from_str(body.trim()).unwrap();
        let events = common::exchange(
            self.port,
            &format!(
                "GET {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
                created.events_url, self.port
            ),
            "\"type\":\"done\"",
            Duration::from_secs(60),
        );
        assert!(events.contains("\"type\":\"done\""), "{events}");
        created.id
    }
}

fn assert_no_escapes(log: &Path) {
    let bytes = std::fs::read(log).unwrap();
    assert!(!bytes.is_empty(), "the server logged nothing");
    let at = bytes.windows(2).position(|w| w == b"\x1b[");
    assert!(
        at.is_none(),
        "an ANSI escape code in the log at byte {}:\n{}",
        at.unwrap_or(0),
        String::from_utf8_lossy(&bytes)
    );
}

#[test]
fn text_logs_in_a_file_carry_no_escape_codes_and_name_the_run() {
    let mut server = Server::start("text", &[], &[]);
    let id = server.run_one();
    let span = format!("run{{id={id}}}");
    // The device thread's lines and the end of the run, each in the run's span.
    let text = server.wait_for(|t| t.contains("run done").then(|| t.to_string()));
    for what in ["run started", "run done"] {
        let line = text
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no `{what}` line:\n{text}"));
        assert!(
            line.contains(&span),
            "`{what}` does not name the run ({span}): {line}"
        );
    }
    assert_no_escapes(&server.log);
}

#[test]
fn json_logs_are_one_object_per_line_with_the_run_id() {
    // The flag after the subcommand here; the environment variable in the second server.
    for (name, args, env) in [
        ("json-flag", &["--log-format", "json"][..], &[][..]),
        ("json-env", &[][..], &[("GRADLESS_LOG_FORMAT", "json")][..]),
    ] {
        let mut server = Server::start(name, args, env);
        let id = server.run_one();
        let text = server.wait_for(|t| t.contains("run done").then(|| t.to_string()));
        assert_no_escapes(&server.log);
        let lines: Vec<serde_json::Value> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {l}"))
            })
            .collect();
        for line in &lines {
            assert!(
                line["level"].is_string() && line["timestamp"].is_string(),
                "{name}: {line}"
            );
            assert!(line["fields"]["message"].is_string(), "{name}: {line}");
        }
        let serving = lines.iter().any(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("serving at"))
        });
        assert!(serving, "{name}: no `serving at` line:\n{text}");
        for what in ["run started", "run done"] {
            let line = lines
                .iter()
                .find(|l| {
                    l["fields"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with(what))
                })
                .unwrap_or_else(|| panic!("{name}: no `{what}` line:\n{text}"));
            assert_eq!(line["span"]["name"], "run", "{name}: {line}");
            assert_eq!(line["span"]["id"], id.as_str(), "{name}: {line}");
        }
    }
}

#[test]
fn every_command_takes_the_log_format() {
    use clap::Parser;
    use server::config::{Cli, LogFormat};
    let parse = |args: &[&str]| Cli::try_parse_from(args).map(|c| c.log.log_format);
    assert_eq!(parse(&["gradless"]).unwrap(), LogFormat::Text);
    assert_eq!(
        parse(&["gradless", "--log-format", "json"]).unwrap(),
        LogFormat::Json
    );
    // Before a subcommand it would be one of `serve`'s own flags (the top level's are
    // `serve`'s, which rule subcommands out): it goes after the subcommand, as any flag.
    assert_eq!(
        parse(&["gradless", "serve", "--log-format", "json"]).unwrap(),
        LogFormat::Json
    );
    assert_eq!(
        parse(&[
            "gradless",
            "worker",
            "--nats",
            "nats://x",
            "--name",
            "w",
            "--log-format",
            "json"
        ])
        .unwrap(),
        LogFormat::Json
    );
    assert_eq!(
        parse(&["gradless", "models", "--log-format", "text"]).unwrap(),
        LogFormat::Text
    );
    let wrong = parse(&["gradless", "--log-format", "xml"])
        .unwrap_err()
        .to_string();
    assert!(wrong.contains("text") && wrong.contains("json"), "{wrong}");
}
