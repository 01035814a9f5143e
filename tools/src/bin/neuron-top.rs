//! `neuron-top`: the monitor's report as a terminal UI (`neuron_tools::top`); q quits.

use crossterm::event::{self, Event, KeyCode, KeyEventKind};
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use crossterm::ExecutableCommand;
use neuron_tools::monitor::{Config, Group, Monitor, RuntimeSel, RUNTIME_GROUPS, SYSTEM_GROUPS};
use neuron_tools::snapshot::{Roots, Snapshot, SysDevices};
use neuron_tools::top::{draw, State};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use std::time::{Duration, Instant};

/// Refresh once a second, every group.
fn config() -> Config {
    let g = |k: &&str| Group {
        kind: k.to_string(),
        period: Duration::from_secs(1),
    };
    Config {
        period: Duration::from_secs(1),
        runtimes: vec![RuntimeSel {
            tag_filter: None,
            groups: RUNTIME_GROUPS.iter().map(g).collect(),
        }],
        system: SYSTEM_GROUPS.iter().map(g).collect(),
        warnings: Vec::new(),
    }
}

fn run(term: &mut Terminal<CrosstermBackend<std::io::Stdout>>) -> std::io::Result<()> {
    let roots = Roots::from_env();
    let mut mon = Monitor::new(config());
    let mut state = State::default();
    let mut last: Option<Instant> = None;
    loop {
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            state.report = match Snapshot::take(&SysDevices, &roots) {
                Ok(s) => mon.report(Ok(&s)),
                Err(e) => mon.report(Err(&e)),
            };
            last = Some(Instant::now());
        }
        term.draw(|f| draw(f, &state))?;
        if event::poll(Duration::from_millis(100))? {
            if let Event::Key(k) = event::read()? {
                if k.kind != KeyEventKind::Press {
                    continue;
                }
                match k.code {
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                    KeyCode::Tab | KeyCode::Right => state.next_tab(),
                    KeyCode::BackTab | KeyCode::Left => state.prev_tab(),
                    _ => {}
                }
            }
        }
    }
}

fn main() {
    if std::env::args().skip(1).any(|a| a == "-h" || a == "--help") {
        println!("usage: neuron-top\n\nTab / arrows: switch process tab; q: quit");
        return;
    }
    let setup = || -> std::io::Result<Terminal<CrosstermBackend<std::io::Stdout>>> {
        enable_raw_mode()?;
        std::io::stdout().execute(EnterAlternateScreen)?;
        Terminal::new(CrosstermBackend::new(std::io::stdout()))
    };
    let r = setup().and_then(|mut t| run(&mut t));
    let _ = disable_raw_mode();
    let _ = std::io::stdout().execute(LeaveAlternateScreen);
    if let Err(e) = r {
        eprintln!("neuron-top: {e}");
        std::process::exit(1);
    }
}
