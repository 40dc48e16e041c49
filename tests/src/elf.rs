//! The `DT_NEEDED` entries of a shared object (what `readelf -d` prints as "Shared library:
//! [...]"), read with the doctor's ELF reader (the `object` crate), and the same list from
//! `readelf` to cross-check it.

use std::path::Path;

/// `DT_NEEDED` names in the order they appear.
pub fn needed_from_bytes(b: &[u8]) -> Result<Vec<String>, String> {
    ferro_doctor::node::nccl::elf::parse_elf(b).map(|facts| facts.needed)
}

/// `DT_NEEDED` names of the file at `path`.
pub fn needed_libraries(path: &Path) -> Result<Vec<String>, String> {
    ferro_doctor::node::nccl::elf::read_elf(path).map(|facts| facts.needed)
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
