fn main() -> std::process::ExitCode {
    keepwrap::cli::main()
}
