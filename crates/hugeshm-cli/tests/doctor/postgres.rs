//! `hugeshm advise --postgres` against a real PostgreSQL cluster, as root: the
//! plan equals PostgreSQL's own `shared_memory_size_in_huge_pages`, `apply`
//! reserves it, the server starts with `huge_pages=on`, and `segments` reports
//! its shared memory on 2 MiB pages with the postmaster and a backend attached.

use crate::common::{hugeshm, json};

use hugeshm_doctor::segments::{Segment, SegmentKind};
use hugeshm_testkit::live;
use hugeshm_testkit::postgres::{skip_unless_postgres, PgCluster};

const M2: u64 = 2 << 20;

#[test]
fn advise_apply_and_see_postgres_on_huge_pages() {
    let Some(pool) = live!() else { return };
    if skip_unless_postgres(pool.name()) {
        return;
    }
    {
        let mut pg = PgCluster::init("256MB").expect("initdb");
        let dd = pg.datadir().display().to_string();
        let own: u64 = pg
            .postgres_c("shared_memory_size_in_huge_pages")
            .expect("postgres -C")
            .parse()
            .expect("a page count");
        assert!(
            own > 128,
            "256 MB of shared_buffers needs more than 128 pages: {own}"
        );

        // Server down: postgres -C.
        let plan = json(hugeshm(&[
            "advise",
            "--postgres",
            &dd,
            "--spare",
            "0",
            "--json",
        ]));
        let counted = &plan["counted"][0];
        assert_eq!(counted["pages"].as_u64(), Some(own), "{plan:#}");
        assert_eq!(counted["page_size_bytes"].as_u64(), Some(M2));
        assert!(
            counted["note"].as_str().unwrap().contains("postgres -C"),
            "{counted}"
        );
        // `postgres -C shared_memory_size` prints MB without the unit: the
        // bytes fill exactly the server's own page count.
        let bytes = counted["bytes"].as_u64().unwrap();
        assert_eq!(bytes.div_ceil(M2), own, "shared_memory_size {bytes} B");
        assert_eq!(plan["pools"][0]["pages"].as_u64(), Some(own));
        // The memlock lines are for the cluster's owner, not every user.
        let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&dd).unwrap());
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
        let owner = hugeshm_parse::passwd::name_of(&passwd, uid)
            .map_or_else(|| format!(":{uid}"), str::to_string);
        assert_eq!(
            plan["config"]["memlock_users"],
            serde_json::json!([owner]),
            "{plan:#}"
        );

        // Reserve exactly that, and start the server requiring huge pages.
        let applied = json(hugeshm(&[
            "apply",
            "--postgres",
            &dd,
            "--spare",
            "0",
            "--json",
        ]));
        assert_eq!(applied["result"]["complete"], true, "{applied:#}");
        assert_eq!(
            applied["result"]["changes"][0]["granted"].as_u64(),
            Some(own)
        );
        pg.start("on")
            .expect("PostgreSQL starts with huge_pages=on on the applied pool");
        let backend = pg.hold_backend().expect("a client backend");
        let postmaster = pg.postmaster_pid().expect("postmaster pid");

        // Running server: asked over its socket, same answer.
        let plan = json(hugeshm(&[
            "advise",
            "--postgres",
            &dd,
            "--spare",
            "0",
            "--json",
        ]));
        assert_eq!(plan["counted"][0]["pages"].as_u64(), Some(own));
        assert!(plan["counted"][0]["note"]
            .as_str()
            .unwrap()
            .contains("running server"));

        // segments: the main area on 2 MiB pages, postmaster and backend attached.
        let out = hugeshm(&["segments", "--json"]);
        assert!(out.status.success());
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("segments JSON");
        assert_eq!(doc["schema"], 1, "{doc:#}");
        let segs: Vec<Segment> =
            serde_json::from_value(doc["segments"].clone()).expect("segments JSON");
        let main = segs
            .iter()
            .find(|s| s.kind == SegmentKind::Anon && s.attached_pids.contains(&postmaster))
            .unwrap_or_else(|| {
                panic!("no anonymous shared segment of postmaster {postmaster}: {segs:#?}")
            });
        assert_eq!(main.page_size_bytes, Some(M2), "{main:#?}");
        assert_eq!(main.size_bytes, own * M2, "{main:#?}");
        assert!(
            main.attached_pids.contains(&backend.backend_pid()),
            "{main:#?}"
        );
        assert!(
            !main.findings.iter().any(|f| f.code == "silent-fallback"),
            "{main:#?}"
        );
        // The interlock: a tiny SysV segment created by the postmaster.
        assert!(
            segs.iter()
                .any(|s| s.kind == SegmentKind::Sysv && s.creator_pid == Some(postmaster)),
            "no SysV interlock segment: {segs:#?}"
        );
        // status: the pool is fully used by PostgreSQL (reserved or faulted).
        let st = json(hugeshm(&["status", "--json"]));
        let row = st["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["page_size_bytes"].as_u64() == Some(M2) && p["node"].is_null())
            .unwrap();
        assert_eq!(row["total"].as_u64(), Some(own));
        assert_eq!(row["available"].as_u64(), Some(0), "{row}");
        // The servers on huge pages, with their memlock limits: PostgreSQL
        // maps its area with mmap and locks nothing, so whatever its limit,
        // no memlock-small.
        let server = st["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .find(|s| s["pid"].as_u64() == Some(postmaster as u64))
            .unwrap_or_else(|| panic!("postmaster not among the servers: {st:#}"));
        assert_eq!(server["huge_bytes"].as_u64(), Some(own * M2), "{server}");
        assert_eq!(server["sysv_created_bytes"].as_u64(), Some(0), "{server}");
        assert!(
            !st["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["code"] == "memlock-small"),
            "{st:#}"
        );

        backend.release().expect("close the backend");
        pg.stop().expect("stop PostgreSQL");
    }
    pool.finish();
}

/// Debian's own cluster (`15/main`, made by the postgresql package and kept
/// down in CI) keeps its postgresql.conf in /etc/postgresql/15/main, not in
/// its data directory: `advise --postgres` finds it there, as
/// `pg_ctlcluster` does, and asks `postgres -C` with it.
#[test]
fn a_debian_cluster_is_sized_from_its_etc_configuration() {
    const T: &str = "a_debian_cluster_is_sized_from_its_etc_configuration";
    if skip_unless_postgres(T) {
        return;
    }
    let conf = std::path::Path::new("/etc/postgresql/15/main/postgresql.conf");
    let dd = "/var/lib/postgresql/15/main";
    if !conf.exists() || std::path::Path::new(dd).join("postgresql.conf").exists() {
        return hugeshm_testkit::skip(T, "no Debian cluster 15/main configured in /etc");
    }
    let plan = json(hugeshm(&["advise", "--postgres", dd, "--json"]));
    let counted = &plan["counted"][0];
    assert!(counted["pages"].as_u64().unwrap() > 0, "{plan:#}");
    let note = counted["note"].as_str().unwrap();
    assert!(note.contains("PostgreSQL 15"), "{note}");
}
