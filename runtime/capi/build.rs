// libnrt.so carries the SONAME the real library has, so programs linked against it record
// `libnrt.so.1` as their dependency.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnrt.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
