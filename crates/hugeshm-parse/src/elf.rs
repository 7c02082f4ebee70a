//! The ELF header and program headers of an executable: what `hugeshm run`
//! needs to know whether the dynamic loader will load a preload library
//! into it (a dynamically linked executable, of the library's machine).

use crate::error::ParseError;

const PATH: &str = "ELF header";

/// `EM_X86_64`.
pub const EM_X86_64: u16 = 62;

const PT_INTERP: u32 = 3;

/// What an executable file is (the kernel runs these two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Executable {
    /// An ELF file.
    Elf(ElfInfo),
    /// A script (`#!` and its interpreter line, up to 255 bytes).
    Script(String),
}

/// The parts of an ELF file's headers that matter for preloading.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElfInfo {
    /// 64-bit (`ELFCLASS64`).
    pub class64: bool,
    /// Little-endian (`ELFDATA2LSB`).
    pub little_endian: bool,
    /// `e_machine` (62: x86-64).
    pub machine: u16,
    /// `e_type`: 2 executable, 3 shared object or PIE.
    pub kind: u16,
    /// It names a program interpreter (`PT_INTERP`): dynamically linked.
    pub dynamic: bool,
}

impl ElfInfo {
    /// The machine in words.
    pub fn machine_name(&self) -> String {
        match self.machine {
            3 => "i386".to_owned(),
            40 => "ARM".to_owned(),
            EM_X86_64 => "x86-64".to_owned(),
            183 => "AArch64".to_owned(),
            243 => "RISC-V".to_owned(),
            m => format!("machine {m}"),
        }
    }
}

/// Reads the start of a file (its first bytes, enough to hold the program
/// headers: 64 KiB is plenty for any real executable).
pub fn parse(bytes: &[u8]) -> Result<Executable, ParseError> {
    if let Some(rest) = bytes.strip_prefix(b"#!") {
        let line = rest.split(|b| *b == b'\n').next().unwrap_or(rest);
        let line = &line[..line.len().min(255)];
        return Ok(Executable::Script(
            String::from_utf8_lossy(line).trim().to_owned(),
        ));
    }
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err(ParseError::file(PATH, "not an ELF file or a script"));
    }
    let class64 = bytes[4] == 2;
    let little_endian = bytes[5] == 1;
    let u16_at = |o: usize| -> u16 {
        let b = [bytes[o], bytes[o + 1]];
        if little_endian {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        }
    };
    let machine = u16_at(18);
    let kind = u16_at(16);
    let mut info = ElfInfo {
        class64,
        little_endian,
        machine,
        kind,
        dynamic: false,
    };
    // The program headers are read for 64-bit little-endian files only:
    // anything else is refused for its class or machine anyway.
    if !(class64 && little_endian) {
        return Ok(Executable::Elf(info));
    }
    let u32_at =
        |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let u64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[o..o + 8]);
        u64::from_le_bytes(b)
    };
    let phoff = u64_at(32);
    let phentsize = u16_at(54) as u64;
    let phnum = u16_at(56) as u64;
    if phnum > 0 && phentsize < 56 {
        return Err(ParseError::file(PATH, "program header entries too small"));
    }
    let end = phentsize
        .checked_mul(phnum)
        .and_then(|n| n.checked_add(phoff))
        .ok_or_else(|| ParseError::file(PATH, "program headers out of range"))?;
    if end > bytes.len() as u64 {
        return Err(ParseError::file(
            PATH,
            format!(
                "program headers end at byte {end}, beyond the {} read",
                bytes.len()
            ),
        ));
    }
    info.dynamic = (0..phnum).any(|i| u32_at((phoff + i * phentsize) as usize) == PT_INTERP);
    Ok(Executable::Elf(info))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(machine: u16, interp: bool) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 2 * 56];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[16..18].copy_from_slice(&3u16.to_le_bytes());
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&2u16.to_le_bytes());
        b[64..68].copy_from_slice(&6u32.to_le_bytes());
        b[120..124].copy_from_slice(&(if interp { PT_INTERP } else { 1 }).to_le_bytes());
        b
    }

    #[test]
    fn dynamic_static_foreign_and_scripts() {
        let Executable::Elf(e) = parse(&elf(EM_X86_64, true)).unwrap() else {
            panic!()
        };
        assert!(e.dynamic && e.class64 && e.machine == EM_X86_64 && e.kind == 3);
        let Executable::Elf(e) = parse(&elf(EM_X86_64, false)).unwrap() else {
            panic!()
        };
        assert!(!e.dynamic);
        let Executable::Elf(e) = parse(&elf(183, true)).unwrap() else {
            panic!()
        };
        assert_eq!(e.machine_name(), "AArch64");
        assert_eq!(
            parse(b"#!/usr/bin/perl -w\nuse strict;").unwrap(),
            Executable::Script("/usr/bin/perl -w".to_owned())
        );
        assert!(parse(b"MZ\x90\x00").is_err());
        let mut short = elf(EM_X86_64, true);
        short.truncate(100);
        assert!(parse(&short).unwrap_err().to_string().contains("beyond"));
        let mut huge = elf(EM_X86_64, true);
        huge[56..58].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(parse(&huge).is_err());
    }

    #[test]
    fn the_real_executables_of_this_host() {
        // The test binary itself: dynamic x86-64 (or whatever built it).
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let Executable::Elf(e) = parse(&me[..me.len().min(65536)]).unwrap() else {
            panic!()
        };
        assert!(e.dynamic, "{e:?}");
    }
}
