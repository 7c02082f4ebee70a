//! A running Oracle instance, as far as the kernel can tell: SysV segments
//! attached by a process whose executable is named `oracle` (a copy of the
//! test process) and whose command line names the SID (`ora_pmon_SID`, as
//! the instance's process monitor rewrites its own). Oracle cannot be
//! installed here; what advise and the findings read is the same.
//! * `advise --oracle-sid SID` counts those segments, each rounded up to
//!   its page size; the same segments held by another executable under the
//!   same command line count nothing.
//! * A segment of them on 4 KiB pages gives `oracle-sga-4k` with the SID,
//!   in Oracle's words (`use_large_pages=TRUE` placed part of the SGA on
//!   4 KiB pages), and its fix; another executable gives none.

use crate::common;
use hugeshm_testkit::live;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

const M2: u64 = 2 << 20;

/// `exe` run as `ora_pmon_SID` holding three SysV segments: 4 MiB and
/// 6 MiB on 2 MiB pages, 4 MiB on 4 KiB pages; killed on drop.
struct Instance(Child);

impl Instance {
    fn start(exe: &Path, sid: &str) -> Instance {
        let mut c = Command::new(exe)
            .arg0(format!("ora_pmon_{sid}"))
            .args(["--touch", "sysv-huge:4M", "sysv-huge:6M", "sysv-plain:4M"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(c.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("\"pid\""), "{line}");
        Instance(c)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// What `advise --oracle-sid SID` counts (label, pages) and skips.
fn advise_sid(sid: &str) -> (Vec<(String, u64)>, Vec<String>) {
    let plan = common::json(common::hugeshm(&[
        "advise",
        "--oracle-sid",
        sid,
        "--spare",
        "0",
        "--json",
    ]));
    let counted = plan["counted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["label"].as_str().unwrap().to_owned(),
                c["pages"].as_u64().unwrap(),
            )
        })
        .collect();
    let skipped = plan["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["reason"].as_str().unwrap().to_owned())
        .collect();
    (counted, skipped)
}

/// The `oracle-sga-4k` findings of `segments` that name `sid`.
fn sga_4k(sid: &str) -> Vec<Value> {
    let v = common::json(common::hugeshm(&["segments", "--json"]));
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "oracle-sga-4k")
        .filter(|f| {
            f["message"]
                .as_str()
                .unwrap()
                .contains(&format!("instance {sid} "))
        })
        .cloned()
        .collect()
}

#[test]
fn a_running_instance_is_known_by_its_exe_and_its_sid() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 5).expect("5 free 2 MiB pages");
    let tmp = hugeshm_testkit::TempDir::new("oracle-sid");
    let testproc = hugeshm_testkit::testproc_built().unwrap();
    let oracle = tmp.path().join("oracle");
    std::fs::copy(&testproc, &oracle).unwrap();
    let sid = format!("T{}", std::process::id());
    {
        let _db = Instance::start(&oracle, &sid);
        let (counted, _) = advise_sid(&sid);
        println!("advise --oracle-sid {sid}: {counted:?}");
        assert_eq!(counted.len(), 3, "{counted:?}");
        assert!(counted
            .iter()
            .all(|(l, _)| l.starts_with(&format!("oracle {sid}: sysv "))));
        // 4 MiB: 2 pages, 6 MiB: 3, the 4 MiB on 4 KiB pages: 2 at 2 MiB.
        let mut pages: Vec<u64> = counted.iter().map(|c| c.1).collect();
        pages.sort();
        assert_eq!(pages, [2, 2, 3]);
        let f = sga_4k(&sid);
        assert_eq!(f.len(), 1, "{f:#?}");
        let m = f[0]["message"].as_str().unwrap();
        assert!(
            m.contains("has 1 SysV segment of its SGA (4 MiB) on 4 KiB pages")
                && m.contains("use_large_pages=TRUE placed part of the SGA on 4 KiB pages"),
            "{m}"
        );
        let fix = f[0]["fix"].as_str().unwrap();
        assert!(
            fix.contains(&format!("hugeshm apply --oracle-sid {sid}"))
                && fix.contains("use_large_pages=ONLY"),
            "{fix}"
        );
    }
    {
        // The same command line from another executable proves nothing.
        let _not_db = Instance::start(&testproc, &sid);
        let (counted, skipped) = advise_sid(&sid);
        assert!(counted.is_empty(), "{counted:?}");
        assert!(
            skipped.iter().any(|s| s.contains("no SysV segment")),
            "{skipped:?}"
        );
        assert!(sga_4k(&sid).is_empty());
    }
    pool.finish();
}
