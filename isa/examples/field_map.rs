//! Print the per-opcode field maps as the markdown tables of `docs/isa/cayman.md`.
//!
//! `cargo run -p neuron-isa --example field_map`

use neuron_isa::cayman::{layout_of, Kind, Namespace, Opcode};

fn kind(k: Kind) -> String {
    match k {
        Kind::U8 => "u8".into(),
        Kind::U16 => "u16".into(),
        Kind::U32 => "u32".into(),
        Kind::I32 => "i32".into(),
        Kind::F32 => "f32".into(),
        Kind::U64 => "u64".into(),
        Kind::Dtype => "dtype code (u8)".into(),
        Kind::Enum(t) => {
            let v: Vec<String> = t.iter().map(|(c, n)| format!("{c}={n}")).collect();
            format!("enum u8 ({})", v.join(", "))
        }
        Kind::Ap(d) => format!("AP{d}: u32 addr, {d}×i16 step, {d}×u16 num"),
        Kind::Addr => "DMA address (u64, tag in byte 7)".into(),
        Kind::VarAddr => "u32 var id, u32 offset (NEFF); absolute u64 (loaded)".into(),
        Kind::Bytes(n) => format!("{n}×u8"),
    }
}

fn main() {
    for op in Opcode::all() {
        let nb = op
            .byte(Namespace::Neff)
            .map(|b| format!("0x{b:02x}"))
            .unwrap_or("—".into());
        let lb = op
            .byte(Namespace::Loaded)
            .map(|b| format!("0x{b:02x}"))
            .unwrap_or("—".into());
        println!("\n#### {} (NEFF {nb}, loaded {lb})\n", op.name());
        let l = layout_of(op);
        if l.is_empty() {
            println!("No operand fields: bytes 12–63 are kept raw.");
            continue;
        }
        println!("| bytes | field | encoding | grade | evidence / meaning |");
        println!("|---|---|---|---|---|");
        let mut covered = [false; 64];
        for f in l {
            let n = f.kind.size();
            covered[f.off as usize..f.off as usize + n].fill(true);
            let range = if n == 1 {
                format!("{}", f.off)
            } else {
                format!("{}–{}", f.off, f.off as usize + n - 1)
            };
            println!(
                "| {range} | `{}` | {} | {} | {} |",
                f.name,
                kind(f.kind),
                f.grade.name(),
                f.note
            );
        }
        let mut gaps = Vec::new();
        let mut i = 12;
        while i < 64 {
            if !covered[i] {
                let s = i;
                while i < 64 && !covered[i] {
                    i += 1;
                }
                gaps.push(if i - s == 1 {
                    format!("{s}")
                } else {
                    format!("{s}–{}", i - 1)
                });
            } else {
                i += 1;
            }
        }
        if !gaps.is_empty() {
            println!("\nRaw (undecoded): bytes {}.", gaps.join(", "));
        }
    }
}
