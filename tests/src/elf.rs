//! The `DT_NEEDED` entries of an ELF64 little-endian shared object, read from its dynamic
//! section (what `readelf -d` prints as "Shared library: [...]").

use std::path::Path;

fn bytes_at(b: &[u8], at: usize, n: usize) -> Result<&[u8], String> {
    at.checked_add(n)
        .and_then(|end| b.get(at..end))
        .ok_or_else(|| format!("truncated ELF: {n} bytes at {at:#x}"))
}

fn add(a: usize, b: usize) -> Result<usize, String> {
    a.checked_add(b)
        .ok_or_else(|| "ELF offset overflow".to_string())
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, String> {
    let s = bytes_at(b, at, 2)?;
    Ok(u16::from_le_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, String> {
    let s = bytes_at(b, at, 4)?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, String> {
    let s = bytes_at(b, at, 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Ok(u64::from_le_bytes(a))
}

fn usize_of(v: u64) -> Result<usize, String> {
    usize::try_from(v).map_err(|_| format!("ELF offset {v:#x} too large"))
}

const SHT_DYNAMIC: u32 = 6;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;

struct Section {
    kind: u32,
    offset: usize,
    size: usize,
    link: usize,
}

fn section(b: &[u8], shoff: usize, shentsize: usize, i: usize) -> Result<Section, String> {
    let at = add(
        shoff,
        i.checked_mul(shentsize).ok_or("ELF offset overflow")?,
    )?;
    Ok(Section {
        kind: u32_at(b, add(at, 4)?)?,
        offset: usize_of(u64_at(b, add(at, 24)?)?)?,
        size: usize_of(u64_at(b, add(at, 32)?)?)?,
        link: u32_at(b, add(at, 40)?)? as usize,
    })
}

/// `DT_NEEDED` names in the order they appear.
pub fn needed_from_bytes(b: &[u8]) -> Result<Vec<String>, String> {
    if b.get(0..4) != Some(b"\x7fELF".as_slice()) {
        return Err("not an ELF file".into());
    }
    if b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let shoff = usize_of(u64_at(b, 0x28)?)?;
    let shentsize = u16_at(b, 0x3a)? as usize;
    let shnum = u16_at(b, 0x3c)? as usize;
    if shentsize < 64 {
        return Err(format!("section header size {shentsize} < 64"));
    }
    let mut out = Vec::new();
    let mut found = false;
    for i in 0..shnum {
        let s = section(b, shoff, shentsize, i)?;
        if s.kind != SHT_DYNAMIC {
            continue;
        }
        found = true;
        let strtab = section(b, shoff, shentsize, s.link)?;
        let end_of_dynamic = add(s.offset, s.size)?;
        let end_of_strtab = add(strtab.offset, strtab.size)?;
        let mut at = s.offset;
        while add(at, 16)? <= end_of_dynamic {
            let tag = u64_at(b, at)?;
            let val = usize_of(u64_at(b, add(at, 8)?)?)?;
            at += 16;
            if tag == DT_NULL {
                break;
            }
            if tag == DT_NEEDED {
                let start = add(strtab.offset, val)?;
                let rest = b
                    .get(start..end_of_strtab)
                    .ok_or("DT_NEEDED outside .dynstr")?;
                let end = rest
                    .iter()
                    .position(|c| *c == 0)
                    .ok_or("unterminated DT_NEEDED string")?;
                out.push(String::from_utf8_lossy(&rest[..end]).into_owned());
            }
        }
    }
    if !found {
        return Err("no dynamic section (a static object?)".into());
    }
    Ok(out)
}

/// `DT_NEEDED` names of the file at `path`.
pub fn needed_libraries(path: &Path) -> Result<Vec<String>, String> {
    let b = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    needed_from_bytes(&b).map_err(|e| format!("{}: {e}", path.display()))
}

/// `DT_NEEDED` names as `readelf -d` prints them, or `None` if readelf cannot be run.
pub fn needed_by_readelf(path: &Path) -> Option<Vec<String>> {
    let out = std::process::Command::new("readelf")
        .arg("-d")
        .arg(path)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .filter(|l| l.contains("(NEEDED)"))
            .filter_map(|l| {
                let start = l.find('[')? + 1;
                let end = l.rfind(']')?;
                l.get(start..end).map(str::to_string)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_needs_libc() {
        let exe = std::env::current_exe().expect("exe");
        let needed = needed_libraries(&exe).expect("parse");
        assert!(
            needed.iter().any(|n| n.starts_with("libc.so")),
            "{needed:?}"
        );
        if let Some(r) = needed_by_readelf(&exe) {
            assert_eq!(needed, r);
        }
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(needed_from_bytes(b"not elf at all").is_err());
        assert!(needed_from_bytes(b"\x7fELF\x01\x01").is_err());
        let mut truncated = b"\x7fELF\x02\x01".to_vec();
        truncated.resize(0x30, 0xff);
        assert!(needed_from_bytes(&truncated).is_err());
    }
}
