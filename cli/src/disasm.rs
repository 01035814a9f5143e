//! `neuron-emu disasm`: disassemble the engine programs of a NEFF.

use clap::Args;

#[derive(Args, Debug)]
pub struct DisasmArgs {
    /// The NEFF file.
    pub file: std::path::PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Run the disassembler. Errors carry the exit code (2: bad input, 1: failure).
pub fn run(a: &DisasmArgs) -> Result<(), (u8, String)> {
    Err((1, format!("disasm {}: not built yet", a.file.display())))
}
