//! Builds the vendored llama.cpp sampler stages (`llama/sampling.cpp`).

fn main() {
    println!("cargo:rerun-if-changed=llama/sampling.cpp");
    cc::Build::new()
        .cpp(true)
        .file("llama/sampling.cpp")
        .flag_if_supported("-std=c++17")
        .opt_level(3)
        .warnings(true)
        .compile("llama_sampling");
}
