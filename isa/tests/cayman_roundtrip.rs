//! Acceptance 3 and 4: every word of the eight NEFF fixtures (and of the six loaded
//! programs in the NTFFs) decodes to a known opcode and re-encodes to the same bytes; and
//! decode(encode(x)) = x for generated instructions.

#[path = "../examples/align/common.rs"]
mod common;

use common::*;
use neuron_isa::cayman::{
    layout_of, AccessPattern, CaymanInstr, DmaAddr, Header, Kind, Namespace, Opcode, Value, WORD,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[test]
fn every_neff_word_decodes_and_round_trips() {
    let mut per_op: BTreeMap<String, usize> = BTreeMap::new();
    let mut total = 0usize;
    let neffs = all_neffs();
    assert_eq!(neffs.len(), 8, "eight NEFF fixtures");
    for p in neffs {
        for sg in read_neff(&p) {
            for (_, file, bin) in &sg.engines {
                assert_eq!(bin.len() % WORD, 0, "{}: {file}", p.display());
                for (i, c) in bin.chunks_exact(WORD).enumerate() {
                    let w = word(c);
                    let d = CaymanInstr::decode(Namespace::Neff, &w);
                    assert!(
                        d.opcode.is_known(),
                        "{} {file} word {i}: unknown opcode {:#04x}",
                        p.display(),
                        w[0]
                    );
                    assert_eq!(d.encode(), w, "{} {file} word {i}", p.display());
                    *per_op.entry(d.opcode.name()).or_default() += 1;
                    total += 1;
                }
            }
        }
    }
    assert_eq!(total, 61_577, "word count of the eight NEFFs");
    // The two nkipy-only opcodes decode under their given names.
    assert_eq!(per_op.get("TENSOR_TENSOR"), Some(&1024));
    assert_eq!(per_op.get("MEMSET"), Some(&128));
}

#[test]
fn every_loaded_word_decodes_and_round_trips() {
    let mut total = 0usize;
    for k in kernels() {
        let nt = read_ntff(&fixtures().join(format!("real-profiles/{k}.ntff")));
        assert_eq!(nt.programs.len(), 10, "{k}: 2 subgraphs x 5 engines");
        total += assert_ntff_roundtrips(&k, &nt);
    }
    assert_eq!(total, 6171, "loaded words in the six NTFFs");
}

#[test]
fn pseudo_opcodes_translate_between_namespaces() {
    for (neff, loaded, op) in [
        (0xb1u8, 0xa2u8, Opcode::Drain),
        (0xcc, 0xb1, Opcode::SetOrderingMode),
        (0xd4, 0xb8, Opcode::DmaDirect2d),
    ] {
        assert_eq!(Opcode::from_byte(Namespace::Neff, neff), op);
        assert_eq!(Opcode::from_byte(Namespace::Loaded, loaded), op);
        let mut w = [0u8; WORD];
        w[0] = neff;
        w[1] = 0x10;
        let d = CaymanInstr::decode(Namespace::Neff, &w);
        assert_eq!(d.with_namespace(Namespace::Loaded).encode()[0], loaded);
    }
    // 0xb1 is DRAIN in a NEFF and SET_ORDERING_MODE when loaded.
    assert_ne!(
        Opcode::from_byte(Namespace::Neff, 0xb1),
        Opcode::from_byte(Namespace::Loaded, 0xb1)
    );
}

fn value_for(kind: Kind, r: u64, extra: &[u8]) -> Value {
    match kind {
        Kind::U8 | Kind::Dtype | Kind::Enum(_) => Value::U(r & 0xff),
        Kind::U16 => Value::U(r & 0xffff),
        Kind::U32 => Value::U(r & 0xffff_ffff),
        Kind::U64 => Value::U(r),
        Kind::I32 => Value::I(r as u32 as i32 as i64),
        Kind::F32 => Value::F32(r as u32),
        Kind::Addr => Value::Addr(DmaAddr::decode(r)),
        Kind::VarAddr => Value::Addr(DmaAddr::decode_var32(r)),
        Kind::Ap(d) => {
            let mut ap = AccessPattern {
                addr: r as u32,
                dims: d,
                ..Default::default()
            };
            for i in 0..d as usize {
                ap.step[i] = i16::from_le_bytes([extra[4 * i], extra[4 * i + 1]]);
                ap.num[i] = u16::from_le_bytes([extra[4 * i + 2], extra[4 * i + 3]]);
            }
            Value::Ap(ap)
        }
        Kind::Bytes(n) => Value::Bytes(extra[..n as usize].to_vec()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// decode(encode(x)) = x for instructions built field by field.
    #[test]
    fn generated_instructions_round_trip(
        loaded in any::<bool>(),
        op_pick in any::<u8>(),
        hdr in any::<[u8; 11]>(),
        vals in proptest::collection::vec(any::<u64>(), 24),
        extra in proptest::collection::vec(any::<[u8; 32]>(), 24),
        raw in any::<[u8; WORD]>(),
    ) {
        let ns = if loaded { Namespace::Loaded } else { Namespace::Neff };
        // Opcodes that decode back to themselves (TENSOR_LOAD_VAR only encodes to 0xaa).
        let known: Vec<Opcode> = Opcode::all()
            .filter(|o| o.byte(ns).is_some_and(|b| Opcode::from_byte(ns, b) == *o))
            .collect();
        let opcode = if (op_pick as usize) < known.len() * 4 {
            known[op_pick as usize % known.len()]
        } else {
            Opcode::from_byte(ns, op_pick)
        };
        let byte = opcode.byte(ns).unwrap_or(op_pick);
        let header = Header {
            len: hdr[0], b2: hdr[1], debug_hint: hdr[2], wait_cond: hdr[3], wait_index: hdr[4],
            update_op: hdr[5], update_index: hdr[6],
            wait_value: u32::from_le_bytes([hdr[7], hdr[8], hdr[9], hdr[10]]),
        };
        // Unknown runs: take the layout's gaps from a decoded template, fill with random bytes.
        let mut t = [0u8; WORD];
        t[0] = byte;
        let mut x = CaymanInstr::decode(ns, &t);
        x.header = header;
        for r in &mut x.unknown {
            let o = r.off as usize;
            let n = r.bytes.len();
            r.bytes.copy_from_slice(&raw[o..o + n]);
        }
        for (i, (f, s)) in x.fields.iter_mut().zip(layout_of(opcode)).enumerate() {
            f.value = value_for(s.kind, vals[i], &extra[i]);
        }
        let w = x.encode();
        prop_assert_eq!(CaymanInstr::decode(ns, &w), x);
    }

    /// encode(decode(w)) = w for arbitrary words in both namespaces.
    #[test]
    fn arbitrary_words_round_trip(w in any::<[u8; WORD]>(), loaded in any::<bool>()) {
        let ns = if loaded { Namespace::Loaded } else { Namespace::Neff };
        prop_assert_eq!(CaymanInstr::decode(ns, &w).encode(), w);
    }
}

#[test]
fn to_instr_maps_copy_cast_and_header() {
    use neuron_isa::{Op, SemOp, Space, WaitCond};
    // akc-baseline_bf16_s512 sg00 Activation word: COPY S[5]>=1, S[4]++, PSUM → SBUF.
    let hex = "46100000050513040100000000080002010001000100010000020100010001000a0a800000000000000000000040000001000100010001000002010001000100";
    let mut w = [0u8; WORD];
    for i in 0..WORD {
        w[i] = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex");
    }
    let d = CaymanInstr::decode(Namespace::Neff, &w);
    assert_eq!(d.opcode, Opcode::Copy);
    let i = d.to_instr().expect("COPY maps");
    let wt = i.sync.wait.expect("wait");
    assert_eq!((wt.cond, wt.index, wt.value), (WaitCond::Ge, 5, 1));
    let up = i.sync.update.expect("update");
    assert_eq!((up.op, up.index), (SemOp::Inc, 4));
    match i.op {
        Op::Copy { dst, src } => {
            assert_eq!(src.space, Space::Psum);
            assert_eq!(src.offset, 0x800);
            assert_eq!(dst.space, Space::Sbuf);
            assert_eq!(dst.offset, 0x4000);
            assert_eq!(src.free_elems(), 512);
            assert_eq!(dst.partitions, 128);
        }
        o => panic!("{o:?}"),
    }
    // MATMUL has no single-word Op form (its stationary operand is the LDWEIGHTS before it).
    let mut m = [0u8; WORD];
    m[0] = 0x02;
    m[1] = 0x10;
    assert!(CaymanInstr::decode(Namespace::Neff, &m)
        .to_instr()
        .is_none());
}
