//! Regenerate the project's checked-in NEFF fixtures:
//! `cargo run -p neuron-kbuild --example gen_fixtures [OUT_DIR]` (default `fixtures/neff`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fixtures/neff".to_string());
    std::fs::create_dir_all(&dir)?;
    let mlp = neuron_kbuild::kernels::mlp()?;
    let path = format!("{dir}/mlp.neff");
    std::fs::write(&path, &mlp)?;
    println!("wrote {path} ({} bytes)", mlp.len());
    Ok(())
}
