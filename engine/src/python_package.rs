//! The Python package `python/gradless/` as the binary carries it: its sources compiled in,
//! and the `python -c` programs that run one of its modules from them, so that a server
//! needs no checkout to time a card from Python or to compile a model ahead of time.
//!
//! The package holds the built-in architectures once (`models.py`); the cards' Python side
//! (`card_peer.py`, run by `crate::pitfalls::python`), the ahead-of-time compile
//! (`aoti_compile.py`, run by `crate::lab::compiled`) and the PyTorch peer (`peer.py`,
//! exported by the server as a standalone script, [`standalone_peer`]) import them from
//! there. A program ([`program`]) installs an import hook that finds the package's modules
//! among the compiled-in sources, then runs the module as `__main__` (`runpy`), so the
//! module imports `gradless.models` as it does from a checkout.

/// The package's modules, by name, with their sources.
const INIT: &str = include_str!("../../python/gradless/__init__.py");
/// The architectures (`gradless.models`).
pub const MODELS: &str = include_str!("../../python/gradless/models.py");
/// The PyTorch peer of `gradless measure` (`gradless.peer`).
pub const PEER: &str = include_str!("../../python/gradless/peer.py");
const CARD_PEER: &str = include_str!("../../python/gradless/card_peer.py");
const AOTI_COMPILE: &str = include_str!("../../python/gradless/aoti_compile.py");

/// A module of the package that the engine runs as a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `gradless.card_peer`: the cards' Python side.
    CardPeer,
    /// `gradless.aoti_compile`: a model compiled ahead of time.
    AotiCompile,
}

impl Entry {
    fn module(self) -> (&'static str, &'static str) {
        match self {
            Entry::CardPeer => ("gradless.card_peer", CARD_PEER),
            Entry::AotiCompile => ("gradless.aoti_compile", AOTI_COMPILE),
        }
    }
}

/// What a program does with the sources: an import hook that serves them (a module's code
/// carries its path in the package for tracebacks), then the entry run as `__main__` with
/// the program's arguments as its `sys.argv[1:]`.
const BOOTSTRAP: &str = r#"
import importlib.abc, importlib.machinery, linecache, runpy, sys


class CompiledIn(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Finds the modules of the package gradless among the sources Gradless compiled in."""

    def find_spec(self, name, path=None, target=None):
        if name not in SOURCES:
            return None
        return importlib.machinery.ModuleSpec(name, self, origin=self.path(name), is_package=name == "gradless")

    @staticmethod
    def path(name):
        return "python/" + name.replace(".", "/") + ("/__init__.py" if name == "gradless" else ".py") + " (compiled into gradless)"

    def is_package(self, name):
        return name == "gradless"

    def get_source(self, name):
        # A warning asks for the entry's lines by the name it runs under (linecache).
        return SOURCES.get(ENTRY if name == "__main__" else name)

    def get_code(self, name):
        # Tracebacks and warnings quote the lines: linecache has them under the code's path.
        path, source = self.path(name), SOURCES[name]
        linecache.cache[path] = (len(source), None, source.splitlines(True), path)
        return compile(source, path, "exec", dont_inherit=True)


sys.meta_path.insert(0, CompiledIn())
runpy.run_module(ENTRY, run_name="__main__", alter_sys=True)
"#;

/// The `python -c` program that runs `entry` from the compiled-in sources (the package's
/// `__init__`, `models` and the entry's module). Its arguments follow it on the command
/// line, as the module's `sys.argv[1:]`.
pub fn program(entry: Entry) -> String {
    let (name, source) = entry.module();
    // A JSON string is a Python string literal (serde_json escapes only `"`, `\` and
    // control characters, each as Python reads it).
    let lit = |s: &str| serde_json::to_string(s).expect("a string serialises");
    let sources = [("gradless", INIT), ("gradless.models", MODELS), (name, source)]
        .map(|(n, s)| format!("    {}: {},\n", lit(n), lit(s)))
        .concat();
    format!("SOURCES = {{\n{sources}}}\nENTRY = {}\n{BOOTSTRAP}", lit(name))
}

/// The first and last lines of the block in `peer.py` that imports the architectures; a
/// standalone script holds `models.py` in its place.
const IMPORT_BEGIN: &str = "# ---- the architectures: gradless/models.py";
const IMPORT_END: &str = "# ---- end of the architectures ----\n";

/// `peer.py` as one file that needs only PyTorch: `models.py` in place of the block that
/// imports it (its `from __future__` line left out, which must open a file, as `peer.py`'s
/// does). The server's export (a recorded run's `.py`) is this file.
pub fn standalone_peer() -> String {
    let begin = PEER.find(IMPORT_BEGIN).expect("peer.py marks where it imports gradless.models");
    let end = PEER[begin..].find(IMPORT_END).expect("peer.py marks the end of its import of gradless.models") + begin + IMPORT_END.len();
    let models = MODELS.replacen("from __future__ import annotations\n", "", 1);
    format!(
        "{}# ---- the architectures: gradless/models.py, inlined ----\n{}# ---- end of the architectures ----\n{}",
        &PEER[..begin],
        models.trim_start_matches('\n'),
        &PEER[end..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_fits_in_one_command_line_argument() {
        // Linux refuses an argument over MAX_ARG_STRLEN (32 pages, 128 KiB) at exec.
        for entry in [Entry::CardPeer, Entry::AotiCompile] {
            let n = program(entry).len();
            assert!(n < 100 * 1024, "{entry:?}: {n} bytes");
        }
    }

    #[test]
    fn the_standalone_peer_imports_nothing_of_the_package() {
        let script = standalone_peer();
        let imports = |l: &str| ["from gradless", "import gradless"].iter().any(|i| l.trim_start().starts_with(i));
        assert_eq!(script.lines().filter(|l| imports(l)).count(), 0, "{script}");
        assert_eq!(PEER.lines().filter(|l| imports(l)).count(), 1, "peer.py imports the package once");
        assert_eq!(script.matches("from __future__ import annotations").count(), 1);
        assert!(script.starts_with("#!/usr/bin/env python3\n"));
        assert!(script.contains("class MobileNetV2(nn.Module):") && script.contains("def input_shape("));
    }

    /// The standalone peer runs from a folder holding nothing else, on an architecture it
    /// carries (torchvision's MobileNetV2 built from the inlined copy). Needs
    /// `GRADLESS_PYTHON` (scripts/test.sh sets it).
    #[test]
    fn the_standalone_peer_runs_alone() {
        let Some(python) = std::env::var_os("GRADLESS_PYTHON") else {
            eprintln!("GRADLESS_PYTHON is not set: the standalone peer was not run");
            return;
        };
        let dir = std::env::temp_dir().join(format!("gradless-standalone-peer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("peer.py");
        std::fs::write(&file, standalone_peer()).unwrap();
        let args = ["--model", "mobilenet_v2", "--builtin-models", "--input-size", "32", "--batch", "1", "--warmup", "0", "--iters", "1"];
        let out = std::process::Command::new(&python)
            .arg(&file)
            .args(args)
            .args(["--threads", "1", "--device", "cpu", "--json"])
            .current_dir(&dir)
            .env_remove("PYTHONPATH")
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["parameters"], 3_504_872, "{report}");
        assert_eq!(report["output"]["shape"], serde_json::json!([1, 1000]));
    }
}
