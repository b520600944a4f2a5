//! A state dir dcp cannot write (a plain file where `storage/plugin/dcp` should be), met in the
//! real OpenCode TUI: the turn's prunes are in force, and the next answer tells the person on
//! the screen that they are not saved, why, what a restart loses and what checks it.

use super::fake_llm::Turn;
use super::scenarios::{read, IMMEDIATE};
use super::tui::{block, Screen};
use super::Lab;

/// How long a turn of three model requests may take on a loaded two-core machine.
const TURN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

#[test]
fn tui_tells_that_the_session_s_pruning_cannot_be_saved_and_why() {
    let lab = Lab::new(IMMEDIATE);
    let dir = lab.state_dir();
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    std::fs::write(&dir, "a file where the state dir should be").unwrap();
    lab.llm.push(vec![
        read("p1.first", "src/parser.py"),
        read("p1.again", "src/parser.py"),
        Turn::text("p1.answer", "A parser with 12 sections."),
    ]);
    let screen = Screen::start(&lab, &[]);
    screen.submit("Explore the parser.");
    screen.wait_until("the first answer and its prunes", TURN_TIMEOUT, |s| {
        s.contains("A parser with 12 sections.") && s.contains("in force")
    });

    // The save after the prune fails on the writer thread; the next answer tells it.
    lab.llm.push(vec![Turn::text("p2.answer", "It has 12 sections.")]);
    screen.submit("How many sections?");
    let text = screen.wait_until("the second answer and the notice", TURN_TIMEOUT, |s| {
        s.contains("It has 12 sections.") && s.contains("cannot be saved")
    });
    let notice = screen.filtered(&block(&text, "▣ DCP | this session's pruning cannot be saved"));
    println!("--- the pane's notice ---\n{notice}");
    let flat = notice.split_whitespace().collect::<Vec<_>>().join(" ");
    // The pane may break the long path anywhere: it is compared without whitespace.
    let shown = screen.filtered(&dir.display().to_string());
    let tight: String = flat.split(' ').collect();
    let named: String = format!("cannot create state dir {shown}: {shown} is not a directory").split(' ').collect();
    assert!(tight.contains(&named), "{notice}");
    assert!(flat.contains("It goes on in memory but is lost when OpenCode restarts"), "{notice}");
    assert!(flat.contains("`dcp doctor` checks the state dir"), "{notice}");
    assert!(dir.is_file(), "the file in the way is left as it was");
}
