//! Instruction encodings decoded into one Instr form; encoders
