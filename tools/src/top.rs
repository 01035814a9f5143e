//! `neuron-top`: a terminal view of the monitor's report (`nrt-api-and-neff.md` §5.5): title
//! (version, instance), "NeuronCore <version> Utilization", vCPU usage (system and runtime),
//! "Memory Usage Summary" (host and device), "Memory Usage Details" (per model), and a tab per
//! Neuron process plus "all". Keys: Tab / ← → switch tabs, q quits.

use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Gauge, Paragraph, Tabs};
use ratatui::Frame;
use serde_json::Value;

/// What the screen shows: the latest monitor report and the selected tab (0 = all).
#[derive(Debug, Clone, Default)]
pub struct State {
    pub report: Value,
    pub tab: usize,
}

/// The section titles, in screen order.
pub const SECTIONS: [&str; 4] = [
    "Utilization",
    "vCPU Usage",
    "Memory Usage Summary",
    "Memory Usage Details",
];

impl State {
    /// The runtime blocks of the report.
    fn runtimes(&self) -> Vec<&Value> {
        self.report["neuron_runtime_data"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default()
    }

    /// The tab names: "all", then one per process ("<tag> (pid)").
    pub fn tabs(&self) -> Vec<String> {
        let mut t = vec!["all".to_string()];
        for r in self.runtimes() {
            t.push(format!(
                "{} ({})",
                r["neuron_runtime_tag"].as_str().unwrap_or(""),
                r["pid"]
            ));
        }
        t
    }

    /// The runtimes the selected tab shows.
    fn selected(&self) -> Vec<&Value> {
        let all = self.runtimes();
        match self.tab {
            0 => all,
            i => all.get(i - 1).copied().into_iter().collect(),
        }
    }

    pub fn next_tab(&mut self) {
        self.tab = (self.tab + 1) % self.tabs().len().max(1);
    }

    pub fn prev_tab(&mut self) {
        let n = self.tabs().len().max(1);
        self.tab = (self.tab + n - 1) % n;
    }
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn human(bytes: f64) -> String {
    const U: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = bytes;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1}{}", U[i])
}

/// Draw the whole screen.
pub fn draw(f: &mut Frame, s: &State) {
    let hw = &s.report["neuron_hardware_info"];
    let inst = &s.report["instance_info"];
    let rows = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(1),
            Constraint::Length(3),
            Constraint::Min(6),
            Constraint::Length(5),
            Constraint::Length(9),
            Constraint::Min(4),
        ])
        .split(f.area());
    let title = format!(
        "neuron-top (neuron-emu {}) | instance {} {} | q: quit, Tab: next tab",
        env!("CARGO_PKG_VERSION"),
        inst["instance_id"].as_str().unwrap_or(""),
        inst["instance_type"].as_str().unwrap_or(""),
    );
    f.render_widget(
        Paragraph::new(title).style(Style::default().add_modifier(Modifier::BOLD)),
        rows[0],
    );
    let tabs = Tabs::new(s.tabs())
        .select(s.tab)
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title("Neuron Processes"),
        )
        .highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    f.render_widget(tabs, rows[1]);
    let sel = s.selected();
    draw_utilization(
        f,
        rows[2],
        hw["neuroncore_version"].as_str().unwrap_or(""),
        &sel,
    );
    draw_vcpu(f, rows[3], &s.report, &sel);
    draw_summary(f, rows[4], &sel);
    draw_details(f, rows[5], &sel);
}

fn draw_utilization(f: &mut Frame, area: Rect, version: &str, sel: &[&Value]) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!("NeuronCore {version} Utilization"));
    let inner = block.inner(area);
    f.render_widget(block, area);
    let mut cores: Vec<(String, f64)> = Vec::new();
    for r in sel {
        if let Some(m) = r["report"]["neuroncore_counters"]["neuroncores_in_use"].as_object() {
            for (k, v) in m {
                cores.push((format!("NC{k}"), num(&v["neuroncore_utilization"])));
            }
        }
    }
    if cores.is_empty() {
        f.render_widget(Paragraph::new("no NeuronCore in use"), inner);
        return;
    }
    let n = cores.len().min(inner.height.max(1) as usize);
    let parts = Layout::default()
        .direction(Direction::Vertical)
        .constraints(vec![Constraint::Length(1); n])
        .split(inner);
    for ((name, u), a) in cores.iter().zip(parts.iter()) {
        let g = Gauge::default()
            .ratio((u / 100.0).clamp(0.0, 1.0))
            .label(format!("{name}: {u:.2}%"));
        f.render_widget(g, *a);
    }
}

fn draw_vcpu(f: &mut Frame, area: Rect, report: &Value, sel: &[&Value]) {
    let avg = &report["system_data"]["vcpu_usage"]["average_usage"];
    let (mut ru, mut rs) = (0.0, 0.0);
    for r in sel {
        let v = &r["report"]["neuron_runtime_vcpu_usage"]["vcpu_usage"];
        ru += num(&v["user"]);
        rs += num(&v["system"]);
    }
    let lines = vec![
        Line::from(format!(
            "System vCPU usage:  user {:6.2}%  system {:6.2}%",
            num(&avg["user"]),
            num(&avg["system"])
        )),
        Line::from(format!(
            "Runtime vCPU usage: user {ru:6.2}%  system {rs:6.2}%"
        )),
    ];
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title("vCPU Usage")),
        area,
    );
}

fn draw_summary(f: &mut Frame, area: Rect, sel: &[&Value]) {
    let (mut host, mut dev) = ([0.0f64; 5], [0.0f64; 6]);
    for r in sel {
        let b = &r["report"]["memory_used"]["neuron_runtime_used_bytes"];
        host[0] += num(&b["host"]);
        let h = &b["usage_breakdown"]["host"];
        host[1] += num(&h["tensors"]);
        host[2] += num(&h["constants"]);
        host[3] += num(&h["dma_buffers"]);
        host[4] += num(&h["application_memory"]);
        dev[0] += num(&b["neuron_device"]);
        if let Some(m) = b["usage_breakdown"]["neuroncore_memory_usage"].as_object() {
            for v in m.values() {
                dev[1] += num(&v["tensors"]);
                dev[2] += num(&v["constants"]);
                dev[3] += num(&v["model_code"]);
                dev[4] += num(&v["runtime_memory"]);
                dev[5] += num(&v["model_shared_scratchpad"]);
            }
        }
    }
    let lines = vec![
        Line::from("Host Memory"),
        Line::from(format!(
            "  Total: {}  Tensors: {}  Constants: {}  DMA Buffers: {}  App. Memory: {}",
            human(host[0]),
            human(host[1]),
            human(host[2]),
            human(host[3]),
            human(host[4])
        )),
        Line::from("Device Memory"),
        Line::from(format!(
            "  Total: {}  Tensors: {}  Constants: {}  Model Code: {}  Runtime Memory: {}  Model Scratchpad: {}",
            human(dev[0]),
            human(dev[1]),
            human(dev[2]),
            human(dev[3]),
            human(dev[4]),
            human(dev[5])
        )),
    ];
    f.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title("Memory Usage Summary"),
        ),
        area,
    );
}

fn draw_details(f: &mut Frame, area: Rect, sel: &[&Value]) {
    let mut lines = vec![Line::from(format!(
        "{:<12} {:<28} {:>12} {:>14}",
        "Model ID", "Name", "Host Memory", "Device Memory"
    ))];
    for r in sel {
        for m in r["report"]["memory_used"]["loaded_models"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let (mut h, mut d) = (0.0, 0.0);
            if let Some(sgs) = m["subgraphs"].as_object() {
                for sg in sgs.values() {
                    h += num(&sg["memory_used_bytes"]["host"]);
                    d += num(&sg["memory_used_bytes"]["neuron_device"]);
                }
            }
            lines.push(Line::from(format!(
                "{:<12} {:<28} {:>12} {:>14}",
                m["model_id"],
                m["name"]
                    .as_str()
                    .unwrap_or("")
                    .chars()
                    .take(28)
                    .collect::<String>(),
                human(h),
                human(d)
            )));
        }
    }
    f.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title("Memory Usage Details"),
        ),
        area,
    );
}
