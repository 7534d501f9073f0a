//! Tests that a card's question state (what the page shows before the lock-in) leaves the
//! answer open: its words, its code and the order of its two variants.

use super::*;

/// Words that tell the outcome when a code comment says them.
const TELLS: [&str; 18] = ["oom", "out of memory", "graph kept", "runtimeerror", "raises", "error", "leak", "wasted", "faster", "slower", "frees", "no effect", "saves", "kept alive", "wrong", "pitfall", "avoid", "fix"];

/// Words that frame a variant as the pitfall or the fix: the lesson's framing, shown only
/// after the lock-in.
const FRAMING: [&str; 11] = ["pitfall", "fix", "recommended", "avoid", "avoids", "correct", "incorrect", "wrong", "mistake", "best practice", "right way"];

/// Whether `text` holds `word` as a whole word (or words), any case.
fn has_word(text: &str, word: &str) -> bool {
    let text = text.to_lowercase();
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// A variant named by its place on the page ("(A)", "B's", "as in A", "A: "), which would
/// point at the other code once the order flips. "A" as an article ("A judgment") and "B" as
/// bytes ("4 B") are not.
fn names_a_position(text: &str) -> Option<String> {
    let boundary = |c: Option<char>| !c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    for letter in ["A", "B"] {
        for (i, _) in text.match_indices(letter) {
            let (before, after) = (&text[..i], &text[i + 1..]);
            if !boundary(before.chars().next_back()) || !boundary(after.chars().next()) {
                continue;
            }
            let previous = before.trim_end().rsplit([' ', '(']).next().unwrap_or("");
            let positional = after.starts_with("'s")
                || after.starts_with(':')
                || (before.ends_with('(') && (after.starts_with(')') || after.starts_with(',')))
                || ["in", "of", "than", "against", "and", "to"].contains(&previous) && before.ends_with(' ')
                // "B" alone is a variant, unless it is bytes after a number ("4 B").
                || letter == "B" && !previous.chars().all(|c| c.is_ascii_digit() || c == '.' || c == ',');
            if positional {
                return Some(format!("`{letter}` at {i} in `{text}`"));
            }
        }
    }
    None
}

/// The question state gives nothing away: its title is a question, no text shown before the
/// lock-in contains the claim or frames a variant as the pitfall or the fix, and the code
/// carries no comment that tells the outcome.
#[test]
fn the_question_state_leaves_the_answer_open() {
    for device in [DeviceKind::Cpu, DeviceKind::Cuda] {
        for c in catalogue(device) {
            assert!(c.asks.trim_end().ends_with('?'), "{}: `{}` is not a question", c.id, c.asks);
            assert_ne!(c.asks, c.title, "{}", c.id);
            assert_eq!(c.labels.len(), 2, "{}", c.id);
            assert!(c.setup.len() >= 2, "{}: no setup", c.id);
            let before = format!("{} {} {} {} {} {}", c.asks, c.setup.join(" "), c.labels.join(" "), c.question.text, c.python_pitfall, c.python_fix);
            assert!(!before.contains(c.claim.as_str()) && !before.contains(c.title.as_str()), "{}", c.id);
            let words = format!("{} {} {} {} {}", c.asks, c.setup.join(" "), c.labels.join(" "), c.question.text, c.not_here.as_deref().unwrap_or(""));
            for word in FRAMING {
                assert!(!has_word(&words, word), "{}: the question state says `{word}`, the lesson's framing", c.id);
            }
            for code in [&c.python_pitfall, &c.python_fix] {
                for comment in code.lines().filter_map(|l| l.split_once('#').map(|(_, c)| c)) {
                    let comment = comment.to_lowercase();
                    for tell in TELLS {
                        assert!(!comment.contains(tell), "{}: the comment `#{comment}` tells the outcome ({tell})", c.id);
                    }
                }
            }
        }
    }
}

/// Either variant may be shown first, so each label and each description of it in the
/// setup stands on its own ("the same, with …" would lean on the other), the two labels
/// differ, and no text outside the setup's one line naming them refers to a variant by
/// its place ("(A)", "B's"): the question means the same whichever comes first.
#[test]
fn the_variants_are_named_by_what_they_do_never_by_their_place() {
    for device in [DeviceKind::Cpu, DeviceKind::Cuda] {
        let control = RunControl::default();
        let ctx = Ctx { device, opts: PitfallOptions::default(), control: &control, python: None };
        for c in CARDS {
            assert_ne!(c.labels[0], c.labels[1], "{}", c.id);
            let raw = (c.setup)(&ctx);
            let arms: Vec<&String> = raw.iter().filter(|l| l.contains(kit::ARMS)).collect();
            assert!(arms.len() <= 1, "{}: more than one line names the variants", c.id);
            let mut described: Vec<&str> = c.labels.to_vec();
            for line in &arms {
                let parts: Vec<&str> = line.split(kit::ARMS).collect();
                assert_eq!(parts.len(), 3, "{}: `{line}`", c.id);
                described.extend(&parts[1..]);
            }
            for d in described {
                assert!(!d.trim_start().to_lowercase().starts_with("the same"), "{}: `{d}` leans on the other variant", c.id);
            }
            for text in raw.iter().filter(|l| !l.contains(kit::ARMS)).map(String::as_str).chain([c.question.text.as_ref(), c.asks]) {
                assert_eq!(names_a_position(text), None, "{}: a variant named by its place", c.id);
            }
        }
    }
    assert!(names_a_position("the peak of B (under no_grad) as a multiple of A's?").is_some());
    assert!(names_a_position("run as in A (inside autocast)").is_some());
    assert!(names_a_position("memory_reserved() (A) as a multiple").is_some());
    assert_eq!(names_a_position("A judgment: 2 × 16 layers × 4 B = 10.9 MiB; A package"), None);
}

/// The order of the two variants is the id's ([`protocol::shows_fix_first`]): listed the
/// same on every device, about half the deck fix first, and the setup's line naming them in
/// the order of the code. The question and its grading never depend on that order.
#[test]
fn the_variants_order_tells_nothing_and_grading_ignores_it() {
    let fix_first: Vec<bool> = CARDS.iter().map(|c| c.fix_first()).collect();
    let n = fix_first.iter().filter(|f| **f).count();
    assert!((CARDS.len() * 3 / 10..=CARDS.len() * 7 / 10).contains(&n), "{n} of {} cards show the fix first", CARDS.len());
    let control = RunControl::default();
    for device in [DeviceKind::Cpu, DeviceKind::Cuda] {
        let ctx = Ctx { device, opts: PitfallOptions::default(), control: &control, python: None };
        for (c, info) in CARDS.iter().zip(catalogue(device)) {
            assert_eq!(info.fix_first, protocol::shows_fix_first(c.id), "{}", c.id);
            let (shown, flipped) = (c.planned_in(&ctx, info.fix_first), c.planned_in(&ctx, !info.fix_first));
            assert_eq!(shown, info.setup, "{}", c.id);
            for (line, other) in shown.iter().zip(&flipped).filter(|(a, b)| a != b) {
                // Only the line naming the variants changes, and it names them as shown.
                let parts: Vec<String> = (c.setup)(&ctx).into_iter().filter(|l| l.contains(kit::ARMS)).collect();
                let [before, pitfall, fix] = parts[0].split(kit::ARMS).collect::<Vec<_>>()[..] else { panic!("{}", c.id) };
                let (first, second) = if info.fix_first { (fix, pitfall) } else { (pitfall, fix) };
                assert_eq!(line, &format!("{before}A: {first}; B: {second}"), "{}", c.id);
                assert_eq!(other, &format!("{before}A: {second}; B: {first}"), "{}", c.id);
            }
        }
    }
    // Grading reads the figures the question names, never the page's order: a prediction
    // scores the same against the same report however the variants were shown.
    let q = &memory::EVAL_AND_AUTOGRAD.question;
    let figure = |name: &str, value: f64| protocol::Figure { name: name.into(), value, unit: "bytes".into() };
    let figures = |a: f64, b: f64| vec![figure(&q.figure, a), figure(q.over.as_deref().unwrap(), b)];
    for flipped in [false, true] {
        let mut info = memory::EVAL_AND_AUTOGRAD.info(DeviceKind::Cpu);
        if flipped {
            info.fix_first = !info.fix_first;
            info.labels.reverse();
        }
        assert_eq!(&info.question, q);
        let scored = info.question.score(protocol::Prediction::Value(0.25), &figures(25.0, 100.0));
        assert_eq!((scored.measured, scored.right), (Some(0.25), Some(true)), "flipped: {flipped}");
        let scored = info.question.score(protocol::Prediction::Value(4.0), &figures(25.0, 100.0));
        assert_eq!(scored.right, Some(false), "an answer about the other ratio is wrong, flipped: {flipped}");
    }
}
