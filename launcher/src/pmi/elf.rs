//! The shared libraries an ELF executable or library asks for (`DT_NEEDED`), and where it asks
//! the loader to look for them (`DT_RUNPATH`, `DT_RPATH`): read from the file, never by running
//! it (as `ldd` would). 64-bit little-endian ELF only (x86-64, AArch64); anything else reads as
//! no dependencies.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The most bytes of headers and dynamic data read from one file: a program's dynamic section
/// and string table are kilobytes; a bound keeps a huge or hostile file cheap.
const MAX_READ: u64 = 16 << 20;

/// What one ELF file's dynamic section names.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dynamic {
    /// `DT_NEEDED`: the libraries, as named (`libmpi.so.40`).
    pub needed: Vec<String>,
    /// `DT_RUNPATH` and `DT_RPATH` entries, `$ORIGIN` not yet replaced.
    pub search: Vec<String>,
}

/// Reads the dynamic section of the ELF file at `path`. `None` if it is not a 64-bit
/// little-endian ELF file or cannot be read; an empty [`Dynamic`] for a static executable.
pub fn dynamic(path: &Path) -> Option<Dynamic> {
    let mut file = File::open(path).ok()?;
    let mut header = [0u8; 64];
    file.read_exact(&mut header).ok()?;
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let phoff = u64_at(&header, 32)?;
    let phentsize = u64::from(u16_at(&header, 54)?);
    let phnum = u64::from(u16_at(&header, 56)?);
    if phentsize < 56 || phnum == 0 || phentsize * phnum > MAX_READ {
        return Some(Dynamic::default());
    }
    let table = read_at(&mut file, phoff, phentsize * phnum)?;
    let headers: Vec<&[u8]> = table.chunks(phentsize as usize).collect();
    let loads: Vec<Load> = headers.iter().filter_map(|h| Load::of(h)).collect();
    let Some(dynamic) = headers.iter().find(|h| u32_at(h, 0) == Some(PT_DYNAMIC)) else {
        return Some(Dynamic::default());
    };
    let (offset, size) = (u64_at(dynamic, 8)?, u64_at(dynamic, 32)?);
    let entries = read_at(&mut file, offset, size.min(MAX_READ))?;
    let mut names = Vec::new();
    let (mut strtab, mut strsz) = (None, None);
    for entry in entries.chunks_exact(16) {
        let (tag, value) = (u64_at(entry, 0)?, u64_at(entry, 8)?);
        match tag {
            DT_NULL => break,
            DT_NEEDED | DT_RPATH | DT_RUNPATH => names.push((tag, value)),
            DT_STRTAB => strtab = Some(value),
            DT_STRSZ => strsz = Some(value),
            _ => {}
        }
    }
    let strtab = loads.iter().find_map(|l| l.file_offset(strtab?))?;
    let strings = read_at(&mut file, strtab, strsz?.min(MAX_READ))?;
    let mut out = Dynamic::default();
    for (tag, at) in names {
        let Some(s) = c_string(&strings, at) else {
            continue;
        };
        if tag == DT_NEEDED {
            out.needed.push(s);
        } else {
            out.search
                .extend(s.split(':').filter(|p| !p.is_empty()).map(String::from));
        }
    }
    Some(out)
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;

/// A loaded segment: where its bytes are in the file and in memory.
struct Load {
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

impl Load {
    fn of(header: &[u8]) -> Option<Load> {
        (u32_at(header, 0)? == PT_LOAD).then_some(())?;
        Some(Load {
            offset: u64_at(header, 8)?,
            vaddr: u64_at(header, 16)?,
            filesz: u64_at(header, 32)?,
        })
    }

    /// The file offset of the virtual address `addr`, if this segment holds it.
    fn file_offset(&self, addr: u64) -> Option<u64> {
        let within = addr.checked_sub(self.vaddr)?;
        (within < self.filesz).then(|| self.offset + within)
    }
}

fn read_at(file: &mut File, offset: u64, len: u64) -> Option<Vec<u8>> {
    file.seek(SeekFrom::Start(offset)).ok()?;
    let mut buf = Vec::new();
    file.take(len).read_to_end(&mut buf).ok()?;
    Some(buf)
}

fn c_string(table: &[u8], at: u64) -> Option<String> {
    let rest = table.get(usize::try_from(at).ok()?..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    String::from_utf8(rest[..end].to_vec()).ok()
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_executable_names_libc() {
        let d = dynamic(Path::new("/bin/sh")).expect("an ELF file");
        assert!(d.needed.iter().any(|n| n.starts_with("libc.so")), "{d:?}");
    }

    #[test]
    fn text_and_missing_files_are_not_elf() {
        assert_eq!(dynamic(Path::new("/etc/passwd")), None);
        assert_eq!(dynamic(Path::new("/nonexistent/program")), None);
    }
}
