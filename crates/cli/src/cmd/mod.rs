//! Subcommands. Each `run` returns the exit code and prints its own errors.

pub mod channel;
pub mod daemon;
pub mod generate;
pub mod lab;
pub mod manual;
pub mod status;
pub mod top;
pub mod topology;

/// A value parser for an option with a fixed set of `values`: clap
/// refuses any other with the list, `--help` shows them, and shell
/// completions offer them (instead of file names); the value is then
/// parsed with `T::from_str`.
pub fn choice<T>(values: &'static [&'static str]) -> impl clap::builder::TypedValueParser<Value = T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
    T::Err: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(values).try_map(|s| s.parse::<T>())
}

/// Prints `err` with its causes as `allot: …` and returns exit code 1.
pub fn fail(err: anyhow::Error) -> i32 {
    eprintln!("allot: {err:#}");
    1
}
