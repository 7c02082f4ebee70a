//! A MariaDB or MySQL option file (`my.cnf`), as the server's
//! `load_defaults` reads it: `[group]` headers, `name = value` or a bare
//! `name` (a switch), `#` and `;` comments, `!include FILE` and
//! `!includedir DIR` lines. Reading the included files is the caller's
//! (hugeshm-probe's `option_files`); [`Settings`] collects the options of
//! the groups a server reads, the last one winning, with names as the
//! server compares them: `-` and `_` alike, a `loose-` prefix dropped,
//! `skip-`/`disable-` turning a switch off and `enable-` on.

use crate::error::ParseError;
use std::collections::BTreeMap;

const PATH: &str = "option file";

/// One meaningful line of an option file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// `[name]`: the group the following options belong to.
    Group(String),
    /// `name = value`, or a bare `name` (`value` is `None`).
    Option {
        /// The name as written (see [`option_name`]).
        name: String,
        /// The value, unquoted, comment dropped.
        value: Option<String>,
    },
    /// `!include FILE`.
    Include(String),
    /// `!includedir DIR`: its files whose names end in `.cnf`, by name.
    IncludeDir(String),
}

/// The lines of `text`, with their line numbers (from 1).
pub fn parse(text: &str) -> Result<Vec<(usize, Line)>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('!') {
            let (word, arg) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            let arg = arg.trim();
            if arg.is_empty() {
                return Err(ParseError::at(PATH, n, format!("!{word} names nothing")));
            }
            out.push((
                n,
                match word {
                    "include" => Line::Include(arg.to_owned()),
                    "includedir" => Line::IncludeDir(arg.to_owned()),
                    _ => {
                        return Err(ParseError::at(
                            PATH,
                            n,
                            format!("unknown directive !{word}"),
                        ))
                    }
                },
            ));
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let name = rest.split_once(']').map(|(g, _)| g.trim()).ok_or_else(|| {
                ParseError::at(PATH, n, format!("a group header without ']': {raw:?}"))
            })?;
            out.push((n, Line::Group(name.to_ascii_lowercase())));
            continue;
        }
        let (name, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), Some(value_of(v))),
            None => (strip_comment(line).trim(), None),
        };
        if name.is_empty() {
            return Err(ParseError::at(
                PATH,
                n,
                format!("an option without a name: {raw:?}"),
            ));
        }
        out.push((
            n,
            Line::Option {
                name: name.to_owned(),
                value,
            },
        ));
    }
    Ok(out)
}

/// A value as `load_defaults` keeps it: quotes removed (`'…'` or `"…"`),
/// else an unquoted `#` comment dropped, blanks trimmed.
fn value_of(v: &str) -> String {
    let v = v.trim();
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q) {
            if let Some(end) = inner.find(q) {
                return inner[..end].to_owned();
            }
        }
    }
    strip_comment(v).trim().to_owned()
}

fn strip_comment(s: &str) -> &str {
    s.split('#').next().unwrap_or("")
}

/// An option's name as the server compares it, with the value a prefix
/// gives a switch: `loose-` dropped, `-` as `_`, lower case;
/// `skip_x`/`disable_x` are `x` off (`"0"`), `enable_x` is `x` on (`"1"`).
pub fn option_name(name: &str) -> (String, Option<&'static str>) {
    let mut n = name.trim().to_ascii_lowercase().replace('-', "_");
    if let Some(r) = n.strip_prefix("loose_") {
        n = r.to_owned();
    }
    for (prefix, value) in [("skip_", "0"), ("disable_", "0"), ("enable_", "1")] {
        if let Some(r) = n.strip_prefix(prefix) {
            return (r.to_owned(), Some(value));
        }
    }
    (n, None)
}

/// The groups a server reads, in the order `--print-defaults` names them.
///
/// ```
/// use hugeshm_parse::mycnf::server_groups;
/// assert_eq!(server_groups(true, "10.11")[2], "mysqld-10.11");
/// assert_eq!(server_groups(false, "8.0"), ["mysqld", "server", "mysqld-8.0"]);
/// ```
pub fn server_groups(mariadb: bool, version: &str) -> Vec<String> {
    let mut g = vec![
        "mysqld".to_owned(),
        "server".to_owned(),
        format!("mysqld-{version}"),
    ];
    if mariadb {
        g.extend([
            "mariadb".to_owned(),
            format!("mariadb-{version}"),
            "mariadbd".to_owned(),
            format!("mariadbd-{version}"),
            "client-server".to_owned(),
            "galera".to_owned(),
        ]);
    }
    g
}

/// Where a setting was made: the file and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The file.
    pub file: String,
    /// Its line (from 1).
    pub line: usize,
    /// The group it was in.
    pub group: String,
}

/// The options of the groups a server reads, the last setting of each
/// winning, by [`option_name`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    values: BTreeMap<String, (Option<String>, Origin)>,
}

impl Settings {
    /// Adds one option line of `file` read in `group` (ignored unless
    /// `groups` holds it).
    pub fn add(
        &mut self,
        groups: &[String],
        group: Option<&str>,
        name: &str,
        value: Option<&str>,
        file: &str,
        line: usize,
    ) {
        let Some(group) = group.filter(|g| groups.iter().any(|x| x == g)) else {
            return;
        };
        let (name, implied) = option_name(name);
        let value = value.map(str::to_owned).or(implied.map(str::to_owned));
        let origin = Origin {
            file: file.to_owned(),
            line,
            group: group.to_owned(),
        };
        self.values.insert(name, (value, origin));
    }

    /// The value of `name` (`Some(None)` for a bare switch) and where it
    /// was set.
    pub fn get(&self, name: &str) -> Option<(Option<&str>, &Origin)> {
        let (n, _) = option_name(name);
        self.values.get(&n).map(|(v, o)| (v.as_deref(), o))
    }

    /// A size setting in bytes (`256M`; K, M, G, T, P, E are powers of
    /// 1024, as `my_getopt` reads them); `Err` names a value that is not one.
    pub fn size(&self, name: &str) -> Result<Option<(u64, &Origin)>, String> {
        let Some((v, o)) = self.get(name) else {
            return Ok(None);
        };
        let v = v.unwrap_or("");
        size_value(v)
            .map(|b| Some((b, o)))
            .ok_or_else(|| format!("{} line {}: {name} = {v:?} is not a size", o.file, o.line))
    }

    /// A switch: `Some(true)` for a bare name, `1`, `ON`, `TRUE`, `YES`.
    pub fn switch(&self, name: &str) -> Option<(bool, &Origin)> {
        let (v, o) = self.get(name)?;
        let on = match v.map(str::to_ascii_lowercase).as_deref() {
            None | Some("") | Some("1") | Some("on") | Some("true") | Some("yes") => true,
            Some(_) => false,
        };
        Some((on, o))
    }
}

/// A number with an optional K/M/G/T/P/E suffix (powers of 1024).
fn size_value(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mult) = match v.chars().last()?.to_ascii_lowercase() {
        'k' => (&v[..v.len() - 1], 1u64 << 10),
        'm' => (&v[..v.len() - 1], 1 << 20),
        'g' => (&v[..v.len() - 1], 1 << 30),
        't' => (&v[..v.len() - 1], 1 << 40),
        'p' => (&v[..v.len() - 1], 1 << 50),
        'e' => (&v[..v.len() - 1], 1 << 60),
        _ => (v, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str, groups: &[String]) -> Settings {
        let mut s = Settings::default();
        let mut group = None;
        for (n, l) in parse(text).unwrap() {
            match l {
                Line::Group(g) => group = Some(g),
                Line::Option { name, value } => {
                    s.add(groups, group.as_deref(), &name, value.as_deref(), "f", n)
                }
                _ => {}
            }
        }
        s
    }

    #[test]
    fn lines_groups_includes_and_comments() {
        let text = "# c\n[client-server]\nsocket = /run/mysqld/mysqld.sock\n\n!includedir /etc/mysql/conf.d/\n[mysqld]\nlarge-pages\ninnodb_buffer_pool_size = \"2G\" # q\nkey_buffer_size=8M # eight\n!include /etc/x.cnf\n";
        let l = parse(text).unwrap();
        assert_eq!(l[0], (2, Line::Group("client-server".into())));
        assert_eq!(l[2], (5, Line::IncludeDir("/etc/mysql/conf.d/".into())));
        assert_eq!(
            l[4].1,
            Line::Option {
                name: "large-pages".into(),
                value: None
            }
        );
        assert_eq!(
            l[6].1,
            Line::Option {
                name: "key_buffer_size".into(),
                value: Some("8M".into())
            }
        );
        assert_eq!(l[7].1, Line::Include("/etc/x.cnf".into()));
        assert!(parse("[mysqld\n").is_err());
        assert!(parse("!include\n").is_err());
        assert!(parse("!frobnicate x\n").is_err());
    }

    #[test]
    fn the_servers_groups_the_last_setting_and_its_name_forms() {
        let g = server_groups(true, "10.11");
        let s = settings(
            "[mysqld]\ninnodb-buffer-pool-size=1G\nlarge_pages=OFF\n[mysql]\nkey_buffer_size=1M\n\
             [mariadb-10.11]\nloose-innodb_buffer_pool_size=3g\nenable-large-pages\n\
             [mariadb-10.6]\nlarge_pages=OFF\n",
            &g,
        );
        assert_eq!(
            s.size("innodb_buffer_pool_size").unwrap().unwrap().0,
            3 << 30
        );
        let (_, o) = s.get("innodb-buffer-pool-size").unwrap();
        assert_eq!((o.line, o.group.as_str()), (7, "mariadb-10.11"));
        // [mysql] is the client's; [mariadb-10.6] another version's.
        assert_eq!(s.get("key_buffer_size"), None);
        assert!(s.switch("large_pages").unwrap().0);
        let s = settings("[server]\nskip-large-pages\n", &g);
        assert!(!s.switch("large_pages").unwrap().0);
        // MySQL 8 reads neither [mariadb] nor [mariadbd].
        let s = settings("[mariadbd]\nlarge_pages\n", &server_groups(false, "8.0"));
        assert_eq!(s.switch("large_pages"), None);
        let s = settings("[mysqld]\nkey_buffer_size=lots\n", &g);
        assert!(s.size("key_buffer_size").is_err());
        assert_eq!(size_value("16k"), Some(16 << 10));
        assert_eq!(size_value("1E"), Some(1 << 60));
        assert_eq!(size_value("17E"), None);
    }
}
