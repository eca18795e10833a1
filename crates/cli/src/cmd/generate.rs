//! `allot completions` and `allot man`: shell completions and man pages
//! generated from the command-line definition itself, so they cannot drift
//! from it.

use std::io::Write;
use std::path::PathBuf;

/// Arguments of `allot completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to write completions for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Arguments of `allot man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Directory to write the pages into (allot.1, allot-run.1, …, and
    /// allotd.toml.5); created if missing.
    #[arg(
        value_name = "DIR",
        required_unless_present = "out",
        conflicts_with = "out"
    )]
    dir: Option<PathBuf>,
    /// The same directory, as an option.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Arguments of `allot shim`.
#[derive(Debug, clap::Args)]
pub struct ShimArgs {
    /// Directory to write liballot_shim.so (and allot's thread
    /// composability manager, as DIR/tcm) into; created (mode 0755) if
    /// missing. It and every directory above it must be writable only by
    /// you or root: the shim is preloaded into other programs.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// Writes the OpenMP shim into `a.out` as `liballot_shim.so` (a link to
/// the build's own file name) and allot's Thread Composability Manager as
/// `tcm` (a link to its directory), and prints both paths.
pub fn shim(a: ShimArgs) -> i32 {
    let dir = match allot_proto::dirs::TrustedDir::create(&a.out, 0o755) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("allot: {}: {e}", a.out.display());
            return 1;
        }
    };
    let installed = match allot_capi::install_shim(&dir) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("allot: cannot write the shim into {}: {e}", a.out.display());
            return 1;
        }
    };
    let link = a.out.join("liballot_shim.so");
    let tmp = a.out.join(".liballot_shim.so.new");
    let _ = std::fs::remove_file(&tmp);
    let linked = std::os::unix::fs::symlink(allot_capi::SHIM_FILE_NAME, &tmp)
        .and_then(|()| std::fs::rename(&tmp, &link));
    if let Err(e) = linked {
        eprintln!("allot: cannot link {}: {e}", link.display());
        return 1;
    }
    // allot's Thread Composability Manager beside it, under a stable name
    // (DIR/tcm) for launchers (allot_cell_tcm_environment).
    let tcm = match allot_capi::tcm::install_tcm(&dir, 0o755) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "allot: cannot write the thread composability manager into {}: {e}",
                a.out.display()
            );
            return 1;
        }
    };
    let link = a.out.join("tcm");
    let tmp = a.out.join(".tcm.new");
    let _ = std::fs::remove_file(&tmp);
    let linked = std::os::unix::fs::symlink(allot_capi::tcm::TCM_DIR_NAME, &tmp)
        .and_then(|()| std::fs::rename(&tmp, &link));
    if let Err(e) = linked {
        eprintln!("allot: cannot link {}: {e}", link.display());
        return 1;
    }
    let _ = writeln!(std::io::stdout(), "{}", installed.display());
    let _ = writeln!(std::io::stdout(), "{}", tcm.display());
    0
}

/// Writes the completion script for `a.shell` to standard output.
pub fn completions(a: CompletionsArgs, mut cli: clap::Command) -> i32 {
    let name = cli.get_name().to_string();
    clap_complete::generate(a.shell, &mut cli, name, &mut std::io::stdout());
    0
}

/// Every visible command's page: `allot` and `allot-<sub>[-<subsub>]`.
fn pages(cmd: &clap::Command, prefix: &str, out: &mut Vec<(String, clap::Command)>) {
    let name = if prefix.is_empty() {
        cmd.get_name().to_string()
    } else {
        format!("{prefix}-{}", cmd.get_name())
    };
    out.push((name.clone(), cmd.clone().name(name.clone())));
    // clap's own `help` subcommands get no page.
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        pages(sub, &name, out);
    }
}

/// Writes one man page per visible command into the directory, with the
/// sections [`super::manual`] adds, and `allotd.toml.5`.
pub fn man(a: ManArgs, cli: clap::Command) -> i32 {
    let Some(out) = a.dir.or(a.out) else {
        eprintln!("allot: man: name the directory to write the pages into");
        return 2;
    };
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("allot: cannot create {}: {e}", out.display());
        return 1;
    }
    let mut all = Vec::new();
    // clap's `help` subcommand has no page to cite.
    let mut cli = cli.disable_help_subcommand(true);
    cli.build();
    pages(&cli, "", &mut all);
    let mut written = Vec::new();
    for (name, cmd) in all {
        let mut text = Vec::new();
        if let Err(e) = render(&name, cmd, &mut text) {
            eprintln!("allot: cannot render {name}: {e}");
            return 1;
        }
        written.push((format!("{name}.1"), text));
    }
    written.push(("allotd.toml.5".into(), config_page().into_bytes()));
    for (file, text) in written {
        let path = out.join(file);
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("allot: cannot write {}: {e}", path.display());
            return 1;
        }
        // A closed standard output (`| head`) does not stop the writing.
        let _ = writeln!(std::io::stdout(), "{}", path.display());
    }
    0
}

/// One command's page: clap's sections (its after-help examples left to
/// the EXAMPLES section), then [`super::manual::sections`].
fn render(name: &str, cmd: clap::Command, w: &mut Vec<u8>) -> std::io::Result<()> {
    let cmd = cmd.after_help("").after_long_help("");
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(w)?;
    }
    for (title, text) in super::manual::sections(name) {
        writeln!(w, ".SH \"{title}\"")?;
        let text = text.strip_prefix("Examples:\n").unwrap_or(text);
        w.write_all(super::manual::roff_verbatim(text).as_bytes())?;
    }
    man.render_version_section(w)?;
    Ok(())
}

/// `allotd.toml(5)`.
fn config_page() -> String {
    let version = env!("CARGO_PKG_VERSION");
    let mut p = format!(".TH allotd.toml 5 \"allotd.toml {version}\"\n");
    p.push_str(".SH NAME\nallotd.toml \\- configuration of the allot broker\n");
    p.push_str(".SH DESCRIPTION\n");
    let text = super::manual::config_page_text();
    let (intro, file) = text.split_once("\n\n").unwrap_or((&text, ""));
    p.push_str(&intro.replace('-', "\\-"));
    p.push_str("\n.SH KEYS\n");
    p.push_str(&super::manual::roff_verbatim(file));
    p.push_str(".SH SEE ALSO\nallot\\-daemon(1), allot(1)\n");
    p
}
