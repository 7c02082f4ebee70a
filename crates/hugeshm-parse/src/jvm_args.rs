//! A Java command line (OpenJDK's `java` launcher and HotSpot's `-X`/`-XX`
//! options) and `java -XX:+PrintFlagsFinal`'s table: the settings that
//! decide what a JVM maps on huge pages.
//!
//! [`split_words`] splits one string as a POSIX shell splits words
//! (quotes, backslashes; no expansion). [`parse`] reads the VM options up to
//! the main class, `-jar FILE`, `-m MODULE` or a source file; an `@argfile`
//! is recorded in [`JvmArgs::argfiles`], never read. Later options win, as
//! in HotSpot. [`flags_final`] reads `-XX:+PrintFlagsFinal`'s lines.

use crate::error::ParseError;
use std::collections::BTreeMap;

const PATH: &str = "java command line";

/// The garbage collector a JVM is told to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gc {
    /// `-XX:+UseG1GC` (the default of a server-class machine).
    G1,
    /// `-XX:+UseSerialGC`.
    Serial,
    /// `-XX:+UseParallelGC`.
    Parallel,
    /// `-XX:+UseZGC`.
    Z,
    /// `-XX:+UseShenandoahGC`.
    Shenandoah,
    /// `-XX:+UseEpsilonGC`.
    Epsilon,
}

impl Gc {
    /// Every collector, the default first.
    pub const ALL: [Gc; 6] = [
        Gc::G1,
        Gc::Serial,
        Gc::Parallel,
        Gc::Z,
        Gc::Shenandoah,
        Gc::Epsilon,
    ];

    /// The flag's name (`UseG1GC`).
    pub fn flag(self) -> &'static str {
        match self {
            Gc::G1 => "UseG1GC",
            Gc::Serial => "UseSerialGC",
            Gc::Parallel => "UseParallelGC",
            Gc::Z => "UseZGC",
            Gc::Shenandoah => "UseShenandoahGC",
            Gc::Epsilon => "UseEpsilonGC",
        }
    }

    fn of_flag(name: &str) -> Option<Gc> {
        Gc::ALL.into_iter().find(|g| g.flag() == name)
    }
}

/// The options of a Java command line hugeshm reads; `None` when not given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JvmArgs {
    /// `-Xmx` / `-XX:MaxHeapSize`, bytes.
    pub max_heap: Option<u64>,
    /// `-Xms` / `-XX:InitialHeapSize`, bytes.
    pub initial_heap: Option<u64>,
    /// `-XX:ReservedCodeCacheSize`, bytes.
    pub code_cache: Option<u64>,
    /// `-XX:±UseLargePages`.
    pub use_large_pages: Option<bool>,
    /// `-XX:±UseSHM` (SysV shared memory for large pages).
    pub use_shm: Option<bool>,
    /// `-XX:±UseTransparentHugePages`.
    pub use_thp: Option<bool>,
    /// `-XX:LargePageSizeInBytes`, bytes (0: the default).
    pub large_page_size: Option<u64>,
    /// `-XX:±AlwaysPreTouch`.
    pub always_pre_touch: Option<bool>,
    /// `-XX:±TieredCompilation` (the code cache's default size follows it).
    pub tiered: Option<bool>,
    /// The last `-XX:+Use…GC`.
    pub gc: Option<Gc>,
    /// `@argfile`s named (not read).
    pub argfiles: Vec<String>,
}

/// `text` split into words as a POSIX shell splits them: blanks separate,
/// `'…'` keeps everything, `"…"` keeps all but `\"`, `\\`, `\$`, `` \` ``,
/// and a backslash outside quotes keeps the next character. No expansion.
pub fn split_words(text: &str) -> Result<Vec<String>, ParseError> {
    let mut words = Vec::new();
    let mut cur: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => words.extend(cur.take()),
            '\'' => {
                let w = cur.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err(ParseError::file(PATH, "unterminated '")),
                    }
                }
            }
            '"' => {
                let w = cur.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => w.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                w.push('\\');
                                w.push(c);
                            }
                            None => return Err(ParseError::file(PATH, "unterminated \"")),
                        },
                        Some(c) => w.push(c),
                        None => return Err(ParseError::file(PATH, "unterminated \"")),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(c) => cur.get_or_insert_with(String::new).push(c),
                None => return Err(ParseError::file(PATH, "a lone \\ at the end")),
            },
            c => cur.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(cur);
    Ok(words)
}

/// The launcher's options that take the next word as their value.
const WITH_VALUE: &[&str] = &[
    "-cp",
    "-classpath",
    "--class-path",
    "-p",
    "--module-path",
    "--upgrade-module-path",
    "--add-modules",
    "--enable-native-access",
    "--limit-modules",
    "--add-reads",
    "--add-exports",
    "--add-opens",
    "--patch-module",
    "--source",
];

/// The VM options of `words`, a command line without the command itself
/// (read up to the main class, `-jar`, `-m` or a source file), as HotSpot
/// takes them: the last of each wins.
pub fn parse<S: AsRef<str>>(words: &[S]) -> Result<JvmArgs, ParseError> {
    let mut a = JvmArgs::default();
    let mut it = vm_words(words).iter().map(AsRef::as_ref);
    while let Some(w) = it.next() {
        if WITH_VALUE.contains(&w) {
            it.next();
            continue;
        }
        if let Some(file) = w.strip_prefix('@') {
            a.argfiles.push(file.to_owned());
            continue;
        }
        option(&mut a, w)?;
    }
    Ok(a)
}

/// The words of `words` before the main class, `-jar`, `-m` or a source
/// file: the launcher's and the VM's options.
pub fn vm_words<S: AsRef<str>>(words: &[S]) -> &[S] {
    let mut i = 0;
    while let Some(w) = words.get(i).map(AsRef::as_ref) {
        if matches!(w, "-jar" | "-m" | "--module") || !w.starts_with(['-', '@']) {
            break;
        }
        i += if WITH_VALUE.contains(&w) { 2 } else { 1 };
    }
    &words[..i.min(words.len())]
}

/// Reads one VM option into `a` (others are not hugeshm's business).
fn option(a: &mut JvmArgs, w: &str) -> Result<(), ParseError> {
    let size = |v: &str| {
        jvm_size(v).ok_or_else(|| ParseError::file(PATH, format!("{w:?}: {v:?} is not a size")))
    };
    if let Some(v) = w.strip_prefix("-Xmx") {
        a.max_heap = Some(size(v)?);
    } else if let Some(v) = w.strip_prefix("-Xms") {
        a.initial_heap = Some(size(v)?);
    } else if let Some(xx) = w.strip_prefix("-XX:") {
        if let Some((name, v)) = xx.split_once('=') {
            let slot = match name {
                "MaxHeapSize" => &mut a.max_heap,
                "InitialHeapSize" => &mut a.initial_heap,
                "ReservedCodeCacheSize" => &mut a.code_cache,
                "LargePageSizeInBytes" => &mut a.large_page_size,
                _ => return Ok(()),
            };
            *slot = Some(size(v)?);
        } else if let Some((on, name)) = xx
            .strip_prefix('+')
            .map(|n| (true, n))
            .or_else(|| xx.strip_prefix('-').map(|n| (false, n)))
        {
            match name {
                "UseLargePages" => a.use_large_pages = Some(on),
                "UseSHM" => a.use_shm = Some(on),
                "UseTransparentHugePages" => a.use_thp = Some(on),
                "AlwaysPreTouch" => a.always_pre_touch = Some(on),
                "TieredCompilation" => a.tiered = Some(on),
                n => {
                    if let (Some(g), true) = (Gc::of_flag(n), on) {
                        a.gc = Some(g);
                    }
                }
            }
        }
    }
    Ok(())
}

/// A HotSpot size: digits, then `k`, `m`, `g` or `t` (either case, powers
/// of 1024) or nothing (bytes).
pub fn jvm_size(v: &str) -> Option<u64> {
    let (digits, shift) = match v.as_bytes().last()?.to_ascii_lowercase() {
        b'k' => (&v[..v.len() - 1], 10),
        b'm' => (&v[..v.len() - 1], 20),
        b'g' => (&v[..v.len() - 1], 30),
        b't' => (&v[..v.len() - 1], 40),
        _ => (v, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

/// The Java feature release `java -version` or a JDK's `release` file
/// names (`openjdk version "17.0.15"` and `JAVA_VERSION="17.0.15"` are 17,
/// `java version "1.8.0_402"` is 8).
pub fn java_major(text: &str) -> Option<u32> {
    let line = text.lines().find(|l| {
        (l.contains(" version \"") && !l.contains(" = ")) || l.starts_with("JAVA_VERSION=\"")
    })?;
    let v = line.split('"').nth(1)?;
    let mut parts = v.split(['.', '_', '-', '+']);
    match parts.next()?.parse::<u32>().ok()? {
        1 => parts.next()?.parse().ok(),
        n => Some(n),
    }
}

/// `java -XX:+PrintFlagsFinal`'s table: each flag's name and value as
/// text (`MaxHeapSize` → `268435456`, `UseLargePages` → `true`). Lines
/// that are not a flag (`[Global flags]`, `-version`'s lines) are passed over.
pub fn flags_final(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" = ")?;
            let mut l = left.split_whitespace();
            let (_ty, name) = (l.next()?, l.next()?);
            if l.next().is_some() || !right.trim_end().ends_with('}') {
                return None;
            }
            let value = right.split_whitespace().next().unwrap_or("");
            // A ccstr flag with no value shows its origin right after `=`.
            let value = if value.starts_with('{') { "" } else { value };
            Some((name.to_owned(), value.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_as_a_shell_splits_them() {
        let w = split_words(r#"java  -Xmx1g "-Dx=a b" '-Dy=$HOME' c\ d "q\"t""#).unwrap();
        assert_eq!(w, ["java", "-Xmx1g", "-Dx=a b", "-Dy=$HOME", "c d", "q\"t"]);
        assert!(split_words("java 'open").is_err());
        assert_eq!(split_words("  ").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn vm_options_up_to_the_main_class_last_one_wins() {
        let w = split_words(
            "-Xms256m -Xmx1g -XX:MaxHeapSize=512M -XX:+UseLargePages -XX:+UseSHM -XX:-UseSHM \
             -cp -Xmx9g -XX:LargePageSizeInBytes=1g -XX:+UseSerialGC -XX:+UseParallelGC \
             @opts.txt -XX:ReservedCodeCacheSize=64m -jar app.jar -Xmx99g",
        )
        .unwrap();
        let a = parse(&w).unwrap();
        assert_eq!(a.max_heap, Some(512 << 20));
        assert_eq!(a.initial_heap, Some(256 << 20));
        assert_eq!(a.code_cache, Some(64 << 20));
        assert_eq!(a.use_large_pages, Some(true));
        assert_eq!(a.use_shm, Some(false));
        assert_eq!(a.large_page_size, Some(1 << 30));
        assert_eq!(a.gc, Some(Gc::Parallel));
        assert_eq!(a.argfiles, ["opts.txt"]);
        assert!(parse(&["-Xmx1q"]).is_err());
        assert_eq!(parse(&["Hold.java", "-Xmx1g"]).unwrap().max_heap, None);
    }

    #[test]
    fn sizes_are_hotspots() {
        assert_eq!(jvm_size("268435456"), Some(268_435_456));
        assert_eq!(jvm_size("2K"), Some(2048));
        assert_eq!(jvm_size("1t"), Some(1 << 40));
        assert_eq!(jvm_size("m"), None);
        assert_eq!(jvm_size("99999999999t"), None);
    }

    #[test]
    fn java_versions() {
        assert_eq!(
            java_major("openjdk version \"17.0.15\" 2025-04-15\n"),
            Some(17)
        );
        assert_eq!(
            java_major("x\nopenjdk version \"25\" 2025-09-16 LTS\n"),
            Some(25)
        );
        assert_eq!(java_major("java version \"1.8.0_402\"\n"), Some(8));
        assert_eq!(
            java_major("IMPLEMENTOR=\"x\"\nJAVA_VERSION=\"25.0.3\"\n"),
            Some(25)
        );
        assert_eq!(java_major("nothing\n"), None);
    }

    #[test]
    fn print_flags_final_lines() {
        let text = "[Global flags]\n\
      int ActiveProcessorCount                     = -1                                        {product} {default}\n\
   size_t MaxHeapSize                              = 314572800                                 {product} {command line}\n\
    uintx ReservedCodeCacheSize                    = 251658240                              {pd product} {ergonomic}\n\
     bool UseLargePages                            = true                                   {pd product} {command line}\n\
    ccstr AbortVMOnException                       =                                           {diagnostic} {default}\n\
openjdk version \"17.0.15\" 2025-04-15\n";
        let f = flags_final(text);
        assert_eq!(f["MaxHeapSize"], "314572800");
        assert_eq!(f["ReservedCodeCacheSize"], "251658240");
        assert_eq!(f["UseLargePages"], "true");
        assert_eq!(f["AbortVMOnException"], "");
        assert_eq!(f.len(), 5);
    }
}
