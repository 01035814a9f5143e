//! `neuron-ls`: the devices, their cores, memory, links and BDF, and the processes using
//! them, as the text table of AWS's current docs (trn2n.48xlarge layout: NEURON DEVICE |
//! NEURON CORES | LOGICAL NC | NEURON MEMORY | CONNECTED DEVICES | PCI BDF, `--wide` adding
//! PID | COMMAND | RUNTIME VERSION) or as `--json-output`.

use crate::snapshot::{Device, Process, Snapshot};
use serde_json::{json, Value};

/// The command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    pub wide: bool,
    pub all_procs: bool,
    pub topology: bool,
    pub json: bool,
    pub help: bool,
}

/// Parse the arguments (without the program name); `Err` names the unknown one.
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    for a in args {
        match a.as_str() {
            "-w" | "--wide" => o.wide = true,
            "-a" | "--show-all-procs" => o.all_procs = true,
            "-t" | "--topology" => o.topology = true,
            "-j" | "--json-output" => o.json = true,
            "-h" | "--help" => o.help = true,
            s if s.starts_with('-') && !s.starts_with("--") && s.len() > 2 => {
                // Bundled short flags (`-wa`).
                for c in s[1..].chars() {
                    match c {
                        'w' => o.wide = true,
                        'a' => o.all_procs = true,
                        't' => o.topology = true,
                        'j' => o.json = true,
                        'h' => o.help = true,
                        _ => return Err(format!("unknown option: -{c}")),
                    }
                }
            }
            other => return Err(format!("unknown option: {other}")),
        }
    }
    Ok(o)
}

/// The usage text.
pub const USAGE: &str = "usage: neuron-ls [-h] [-w] [-a] [-t] [-j]\n\n  -w, --wide            show the processes using each device (PID, COMMAND, RUNTIME VERSION)\n  -a, --show-all-procs  also list processes that do not run a Neuron runtime\n  -t, --topology        draw the device topology\n  -j, --json-output     print JSON instead of the table\n  -h, --help            show this help\n";

/// The processes of a device the listing shows.
fn shown<'a>(d: &'a Device, o: &Options) -> impl Iterator<Item = &'a Process> + 'a {
    let all = o.all_procs;
    d.processes.iter().filter(move |p| all || p.is_runtime())
}

fn gb(bytes: u64) -> String {
    format!("{} GB", bytes >> 30)
}

/// The `--json-output` document: a top-level array, 4-space indent, no newline after `]`.
pub fn json(s: &Snapshot, o: &Options) -> String {
    let arr: Vec<Value> = s.devices.iter().map(|d| device_json(d, o)).collect();
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    if serde::Serialize::serialize(&arr, &mut ser).is_err() {
        return "[]".into();
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One device's JSON object, fields in the real tool's order.
pub fn device_json(d: &Device, o: &Options) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("neuron_device".into(), json!(d.index));
    m.insert("bdf".into(), json!(d.bdf));
    m.insert("cpu_affinity".into(), json!(d.cpu_affinity));
    m.insert("numa_node".into(), json!(d.numa_node));
    m.insert(
        "connected_to".into(),
        if d.connected_to.is_empty() {
            Value::Null
        } else {
            json!(d.connected_to)
        },
    );
    m.insert("nc_count".into(), json!(d.nc_count()));
    if d.lnc() > 1 {
        m.insert("logical_neuroncore_config".into(), json!(d.lnc()));
    }
    m.insert("memory_size".into(), json!(d.memory_size()));
    m.insert("neuroncore_ids".into(), json!(d.neuroncore_ids()));
    let procs: Vec<Value> = shown(d, o)
        .map(|p| {
            json!({
                "pid": p.pid,
                "command": p.command,
                "neuron_runtime_version": p.runtime_version().unwrap_or_else(|| "NA".into()),
            })
        })
        .collect();
    m.insert("neuron_processes".into(), Value::Array(procs));
    Value::Object(m)
}

/// Cut a command to `max` characters with `...`.
fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let head: String = s.chars().take(max.saturating_sub(3)).collect();
    format!("{head}...")
}

/// The header lines and the table (and the topology with `-t`).
pub fn table(s: &Snapshot, o: &Options) -> String {
    let mut out = String::new();
    out.push_str(&format!("instance-type: {}\n", s.instance.instance_type));
    out.push_str(&format!("instance-id: {}\n", s.instance.instance_id));
    if let Some(d) = s.devices.first().filter(|d| d.lnc() > 1) {
        out.push_str(&format!("logical-neuroncore-config: {}\n", d.lnc()));
    }
    let mut heads: Vec<[&str; 2]> = vec![
        ["NEURON", "DEVICE"],
        ["NEURON", "CORES"],
        ["LOGICAL", "NC"],
        ["NEURON", "MEMORY"],
        ["CONNECTED", "DEVICES"],
        ["PCI", "BDF"],
    ];
    if o.wide {
        heads.extend([["PID", ""], ["COMMAND", ""], ["RUNTIME", "VERSION"]]);
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    for d in &s.devices {
        let cells = vec![
            d.index.to_string(),
            d.physical_cores().to_string(),
            d.nc_count().to_string(),
            gb(d.memory_size()),
            d.connected_to
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            d.short_bdf(),
        ];
        if !o.wide {
            rows.push(cells);
            continue;
        }
        let procs: Vec<&Process> = shown(d, o).collect();
        if procs.is_empty() {
            let mut r = cells.clone();
            r.extend([String::new(), String::new(), String::new()]);
            rows.push(r);
        }
        for (i, p) in procs.iter().enumerate() {
            let mut r = if i == 0 {
                cells.clone()
            } else {
                vec![String::new(); 6]
            };
            r.push(p.pid.to_string());
            r.push(truncate(&p.command, 20));
            r.push(p.runtime_version().unwrap_or_else(|| "NA".into()));
            rows.push(r);
        }
    }
    let widths: Vec<usize> = (0..heads.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain(heads[c].iter().map(|h| h.len()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let rule = format!(
        "+{}+\n",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("+")
    );
    out.push_str(&rule);
    for line in 0..2 {
        let cells: Vec<String> = heads
            .iter()
            .zip(&widths)
            .map(|(h, w)| format!(" {:^w$} ", h[line], w = *w))
            .collect();
        out.push_str(&format!("|{}|\n", cells.join("|")));
    }
    out.push_str(&rule);
    for r in &rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!(" {:<w$} ", c, w = *w))
            .collect();
        out.push_str(&format!("|{}|\n", cells.join("|")));
    }
    out.push_str(&rule);
    if o.topology {
        out.push_str(&topology(s));
    }
    out
}

/// "Neuron Device Topology": the devices on a grid of four per row with their links.
pub fn topology(s: &Snapshot) -> String {
    let mut out = String::from("\nNeuron Device Topology\n\n");
    for row in s.devices.chunks(4) {
        let line: Vec<String> = row.iter().map(|d| format!("[ {:>2} ]", d.index)).collect();
        out.push_str(&format!("  {}\n", line.join("--")));
        for d in row {
            if !d.connected_to.is_empty() {
                let l: Vec<String> = d.connected_to.iter().map(u32::to_string).collect();
                out.push_str(&format!("  {} <-> {}\n", d.index, l.join(", ")));
            }
        }
        out.push('\n');
    }
    out.push_str(
        "Legend:\n  [ N ] = Neuron Device N\n  --    = link to the next device in the row\n",
    );
    out
}

/// The logfmt line the real tool writes to stderr when it finds no device.
pub fn no_device_line(msg: &str) -> String {
    let esc = msg.replace('\\', "\\\\").replace('"', "\\\"");
    format!("level=error msg=\"{esc}\"")
}

/// Run `neuron-ls` on a snapshot taken by `take`; returns (exit code, stdout, stderr).
pub fn run(
    args: &[String],
    take: impl FnOnce() -> Result<Snapshot, String>,
) -> (i32, String, String) {
    let o = match parse_args(args) {
        Ok(o) => o,
        // The real tool prints argument errors on stdout.
        Err(e) => return (1, format!("{USAGE}neuron-ls: error: {e}\n"), String::new()),
    };
    if o.help {
        return (0, USAGE.to_string(), String::new());
    }
    match take() {
        Ok(s) if !s.devices.is_empty() => {
            let out = if o.json { json(&s, &o) } else { table(&s, &o) };
            (0, out, String::new())
        }
        Ok(_) => (
            1,
            String::new(),
            no_device_line("No neuron devices found") + "\n",
        ),
        Err(e) => (1, String::new(), no_device_line(&e) + "\n"),
    }
}
