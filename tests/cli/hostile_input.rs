//! `kmirror mirrors` given input that selects nothing or is absurdly long: a `--topics` list
//! that is empty or a regular expression matching no topic exits non-zero saying so (and what
//! the expression was matched against), a refused KIP-1279 error always says what to do, and a
//! 40,000-character name is never echoed in full (not by the tool, not inside the broker's
//! messages it prints).

use super::{Broker, broker, kmirror};

/// `kmirror mirrors --bootstrap-server B ARGS...`: exit code, stdout and stderr together.
fn mirrors(destination: &Broker, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["mirrors", "--bootstrap-server", destination.1.as_str()];
    all.extend_from_slice(args);
    let out = kmirror(&all);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// A destination with mirror `m` of another kmirror broker (kept alive with it).
fn destination_with_mirror(dir: &std::path::Path) -> (Broker, Broker) {
    let source_dir = dir.join("source");
    std::fs::create_dir_all(&source_dir).expect("created");
    let source = broker(&source_dir);
    let destination = broker(dir);
    let config = dir.join("m.properties");
    std::fs::write(&config, format!("bootstrap.servers={}\n", source.1)).expect("written");
    let (code, text) = mirrors(
        &destination,
        &[
            "--create",
            "--mirror",
            "m",
            "--mirror-config",
            config.to_str().expect("a UTF-8 path"),
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    (destination, source)
}

#[test]
fn topics_that_select_nothing_are_refused_with_what_was_matched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (destination, _source) = destination_with_mirror(dir.path());

    let (code, text) = mirrors(
        &destination,
        &["--start", "--mirror", "m", "--topics", "no-such-.*"],
    );
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("no topic of the source cluster of mirror m matches \"no-such-.*\"")
            && text.contains("nothing was started"),
        "{text}"
    );

    let (code, text) = mirrors(
        &destination,
        &["--stop", "--mirror", "m", "--topics", "no-such-.*"],
    );
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("no topic of mirror m matches \"no-such-.*\"")
            && text.contains("names of the mirror's topics"),
        "{text}"
    );

    for empty in ["", ","] {
        let (code, text) = mirrors(
            &destination,
            &["--start", "--mirror", "m", "--topics", empty],
        );
        assert_eq!(code, Some(2), "--topics {empty:?}: {text}");
        assert!(text.contains("--topics is empty"), "{text}");
    }

    // A describe's filter: empty, or a pattern that is no regular expression.
    for (topics, wanted) in [
        ("", "--topics is empty"),
        ("(orders", "--topics \"(orders\""),
    ] {
        let (code, text) = mirrors(&destination, &["--describe", "--topics", topics]);
        assert_eq!(code, Some(2), "--topics {topics:?}: {text}");
        assert!(text.contains(wanted), "{text}");
    }
}

/// `--describe --topics` on a mirror without those topics says what it did not find, however
/// the list was typed, once or watching; a pattern that is no regular expression is a usage
/// error before any cluster is reached. Failed before the fixes (found by a review of issue
/// 38): `a, b` and `a;b` were patterns that matched nothing and printed an empty table with
/// exit 0, `--watch` never checked the names, and a bad pattern with the broker down exited 3.
#[test]
fn describe_says_which_topics_it_did_not_find() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (destination, _source) = destination_with_mirror(dir.path());

    for list in ["a, b", "a,,b", " a,b ,a"] {
        let (code, text) = mirrors(&destination, &["--describe", "--topics", list]);
        assert_eq!(code, Some(1), "--topics {list:?}: {text}");
        assert!(
            text.contains("no mirror described has a, b\n"),
            "--topics {list:?}: {text}"
        );
    }
    let many: Vec<String> = (0..12).map(|i| format!("t{i}")).collect();
    let (code, text) = mirrors(&destination, &["--describe", "--topics", &many.join(",")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("no mirror described has t0, t1, t2, t3, t4 and 7 more"),
        "{text}"
    );

    // A pattern that matches nothing (a trailing comma dropped) prints nothing on stdout.
    for (pattern, named) in [
        ("orders;payments", "orders;payments"),
        ("orders.*,", "orders.*"),
    ] {
        let out = kmirror(&[
            "mirrors",
            "--bootstrap-server",
            &destination.1,
            "--describe",
            "--topics",
            pattern,
            "--json",
        ]);
        let text = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(out.stdout.is_empty(), "{pattern:?}: nothing shown");
        assert!(
            text.contains(&format!(
                "no topic of the mirrors described matches \"{named}\""
            )),
            "{text}"
        );
    }
    // The operator's input cannot drive the terminal or reorder what it shows.
    let (code, text) = mirrors(
        &destination,
        &["--describe", "--topics", "\u{1b}[31mred\u{202e}"],
    );
    assert_eq!(code, Some(2), "{text}");
    assert!(
        !text.contains(['\u{1b}', '\u{202e}']) && text.contains("\\u{1b}[31mred\\u{202e}"),
        "{text}"
    );
    // A pattern of 100,000 characters that matches nothing is echoed by its start alone, by
    // every command that matches it against the mirror's topics (they printed it whole).
    let long = "(x|y)".repeat(20_000);
    for action in ["--stop", "--pause", "--resume", "--verify", "--start"] {
        let (code, text) = mirrors(&destination, &[action, "--mirror", "m", "--topics", &long]);
        assert_eq!(code, Some(2), "{action}: {}", &text[..text.len().min(500)]);
        assert!(
            text.len() < 1_000 && text.contains("… (100000 characters)"),
            "{action}: {} characters: {}",
            text.len(),
            &text[..text.len().min(500)]
        );
    }
    // A pattern to start holds no comma: the mirror keeps it in a comma-separated list.
    let (code, text) = mirrors(
        &destination,
        &["--start", "--mirror", "m", "--topics", "a{1,3}"],
    );
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("a pattern to start holds no comma"), "{text}");

    // A watch checks the names on its first refresh (bounded: it used to run on).
    let out = std::process::Command::new("timeout")
        .args([
            "20",
            env!("CARGO_BIN_EXE_kmirror"),
            "mirrors",
            "--bootstrap-server",
        ])
        .args([destination.1.as_str(), "--describe", "--watch", "1"])
        .args(["--topics", "absent", "--json"])
        .output()
        .expect("timeout runs");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "--watch exits at once: {text}");
    assert!(text.contains("no mirror described has absent"), "{text}");

    // A bad pattern, the cluster down: a usage error of every command that takes --topics,
    // the pattern's start echoed alone. One that parses only inside the whole-name wrapping
    // (`^(?:x)|(.*)$`) is refused too: it matched every topic, and a resume took them all.
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    let long = format!("({}", "x".repeat(40_000));
    for (topics, wanted) in [
        (
            "(orders",
            "--topics \"(orders\" is not a regular expression: unclosed group",
        ),
        (
            "zzz)|(.*",
            "--topics \"zzz)|(.*\" is not a regular expression: unopened group",
        ),
        (
            long.as_str(),
            "… (40001 characters)\" is not a regular expression",
        ),
    ] {
        for action in [
            &["--describe"][..],
            &["--start", "--mirror", "m"],
            &["--stop", "--mirror", "m"],
            &["--resume", "--mirror", "m"],
            &["--failover", "--mirror", "m"],
            &["--verify", "--mirror", "m"],
        ] {
            let mut args = vec!["mirrors", "--bootstrap-server", &gone];
            args.extend_from_slice(action);
            args.extend_from_slice(&["--topics", topics]);
            let out = kmirror(&args);
            let text = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{action:?}: {text}");
            assert!(
                text.contains(wanted) && text.len() < 500,
                "{action:?}: {text}"
            );
        }
    }
}

#[test]
fn kip_errors_say_what_to_do() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (destination, _source) = destination_with_mirror(dir.path());
    let (code, text) = mirrors(&destination, &["--delete", "--mirror", "nope"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("UNKNOWN_CLUSTER_MIRROR (137)")
            && text.contains("what to do: check the name"),
        "{text}"
    );
    let (code, text) = mirrors(
        &destination,
        &["--resume", "--mirror", "nope", "--topics", "t"],
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("what to do:"), "{text}");
}

#[test]
fn a_40000_character_name_is_not_echoed_in_full() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (destination, _source) = destination_with_mirror(dir.path());
    let long = "x".repeat(40_000);
    let config = dir.path().join("m.properties");
    let config = config.to_str().expect("a UTF-8 path");
    for args in [
        vec!["--delete", "--mirror", long.as_str()],
        vec![
            "--create",
            "--mirror",
            long.as_str(),
            "--mirror-config",
            config,
            "--validate-only",
        ],
        vec![
            "--create",
            "--mirror",
            long.as_str(),
            "--mirror-config",
            config,
        ],
        vec!["--start", "--mirror", "m", "--topics", long.as_str()],
        vec!["--stop", "--mirror", "m", "--topics", long.as_str()],
        vec!["--pause", "--mirror", long.as_str(), "--topics", "t"],
    ] {
        let (code, text) = mirrors(&destination, &args);
        assert!(matches!(code, Some(1 | 2)), "{:?}: {text}", &args[..1]);
        assert!(
            !text.contains(&"x".repeat(65)) && text.len() < 2_000,
            "{:?} echoed {} characters: {}",
            &args[..1],
            text.len(),
            &text[..text.len().min(500)]
        );
        assert!(
            text.contains(&format!("{}… (40000 characters)", "x".repeat(64))),
            "{:?} says how long the name was: {text}",
            &args[..1]
        );
    }
}
