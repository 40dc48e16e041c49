//! What the dynamic loader would need from a shared library, read from its ELF file: machine,
//! `SONAME`, `DT_NEEDED`, defined dynamic symbols, the symbol versions it needs from each library
//! and those it defines.
//!
//! The file is parsed (the `object` crate), never `dlopen`ed: loading an arbitrary library into
//! the doctor would run its constructors (a plugin's may start threads, open devices or abort),
//! could crash the doctor on a broken or foreign library, and would leave it mapped for good; a
//! parser answers the same questions (does it resolve, what does it export) without executing it.

use object::read::elf::{Dyn as _, ElfFile64, FileHeader as _};
use object::{Object, ObjectSymbol};
use std::path::Path;

/// The dynamic-linking facts of one shared library.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ElfFacts {
    /// `e_machine` (`object::elf::EM_X86_64`, `EM_AARCH64`, ...).
    pub machine: u16,
    pub soname: Option<String>,
    /// `DT_NEEDED` entries, in order.
    pub needed: Vec<String>,
    /// Names of the dynamic symbols it defines.
    pub defined: Vec<String>,
    /// `(library, version)` pairs it needs (`("libc.so.6", "GLIBC_2.34")`).
    pub version_needs: Vec<(String, String)>,
    /// Version names it defines (`GLIBC_2.34` in `libc.so.6`).
    pub version_defs: Vec<String>,
}

impl ElfFacts {
    /// Whether it defines the dynamic symbol `name`.
    pub fn defines(&self, name: &str) -> bool {
        self.defined.iter().any(|d| d == name)
    }
}

/// The machine this doctor was built for (the loader only loads libraries of its own machine).
pub fn host_machine() -> Option<u16> {
    if cfg!(target_arch = "x86_64") {
        Some(object::elf::EM_X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(object::elf::EM_AARCH64)
    } else {
        None
    }
}

/// A machine's usual name.
pub fn machine_name(m: u16) -> String {
    match m {
        object::elf::EM_X86_64 => "x86-64".to_string(),
        object::elf::EM_AARCH64 => "AArch64".to_string(),
        object::elf::EM_PPC64 => "ppc64".to_string(),
        object::elf::EM_386 => "i386".to_string(),
        other => format!("ELF machine {other}"),
    }
}

/// Reads `path` (a 64-bit little-endian shared library).
///
/// # Errors
/// A sentence: unreadable file, not ELF, not 64-bit, or a malformed dynamic section.
pub fn read_elf(path: &Path) -> Result<ElfFacts, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_elf(&data).map_err(|e| format!("{}: {e}", path.display()))
}

/// [`read_elf`] on bytes.
///
/// # Errors
/// As [`read_elf`].
pub fn parse_elf(data: &[u8]) -> Result<ElfFacts, String> {
    if data.get(..4) != Some(b"\x7fELF") {
        return Err("not an ELF file".to_string());
    }
    if data.get(4) != Some(&object::elf::ELFCLASS64) {
        return Err("not a 64-bit ELF file".to_string());
    }
    let file = ElfFile64::<object::Endianness>::parse(data)
        .map_err(|e| format!("malformed ELF file ({e})"))?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let bad = |e: object::read::Error| format!("malformed ELF file ({e})");
    let mut facts = ElfFacts {
        machine: file.elf_header().e_machine(endian),
        ..ElfFacts::default()
    };
    if let Some((entries, link)) = sections.dynamic(endian, data).map_err(bad)? {
        let strings = sections.strings(endian, data, link).map_err(bad)?;
        for d in entries {
            let text = || {
                d.string(endian, strings)
                    .map(|s| String::from_utf8_lossy(s).into_owned())
            };
            match d.tag32(endian) {
                Some(object::elf::DT_NEEDED) => facts.needed.push(text().map_err(bad)?),
                Some(object::elf::DT_SONAME) => facts.soname = Some(text().map_err(bad)?),
                _ => {}
            }
        }
    }
    facts.defined = file
        .dynamic_symbols()
        .filter(|s| s.is_definition())
        .filter_map(|s| s.name().ok().map(str::to_string))
        .collect();
    if let Some((mut needs, link)) = sections.gnu_verneed(endian, data).map_err(bad)? {
        let strings = sections.strings(endian, data, link).map_err(bad)?;
        while let Some((need, mut aux)) = needs.next().map_err(bad)? {
            let lib =
                String::from_utf8_lossy(need.file(endian, strings).map_err(bad)?).into_owned();
            while let Some(a) = aux.next().map_err(bad)? {
                let v = String::from_utf8_lossy(a.name(endian, strings).map_err(bad)?);
                facts.version_needs.push((lib.clone(), v.into_owned()));
            }
        }
    }
    if let Some((mut defs, link)) = sections.gnu_verdef(endian, data).map_err(bad)? {
        let strings = sections.strings(endian, data, link).map_err(bad)?;
        while let Some((_, mut aux)) = defs.next().map_err(bad)? {
            // The first auxiliary entry names the version; later ones name its parents.
            if let Some(a) = aux.next().map_err(bad)? {
                let v = String::from_utf8_lossy(a.name(endian, strings).map_err(bad)?);
                facts.version_defs.push(v.into_owned());
            }
        }
    }
    Ok(facts)
}
