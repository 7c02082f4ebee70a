#!/usr/bin/env python3
"""docs/fleet.md, "Many hosts": for one PostgreSQL 15 cluster per
shared_buffers size, the 2 MiB pages each public approach sets against
PostgreSQL's own shared_memory_size_in_huge_pages and what the collection
(hugeshm.hugeshm.hugeshm_pools) sets, and whether the server then starts
with huge_pages = on; then the time of the collection's runs on this host
(facts, plan in check mode, apply, second run).

    HUGESHM=$PWD/target/debug/hugeshm scripts/measure/ansible-postgres-pages.py [512MB 4GB 8GB]

As root, Debian's postgresql-15 and ansible installed. Each cluster goes in
a new private directory (mkdtemp), port 5498, removed at the end; the pools
are changed under the test kit's lock and put back."""
import fcntl, glob, json, os, shutil, stat, subprocess, sys, tempfile, time

HUGESHM = os.path.abspath(os.environ.get("HUGESHM", "target/debug/hugeshm"))
PGBIN = os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NR = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
SIZES = sys.argv[1:] or ["512MB", "4GB", "8GB"]
M2 = 2 << 20


def sh(argv, **kw):
    return subprocess.run(argv, text=True, capture_output=True, **kw)


def as_pg(cmd):
    return sh(["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"] + cmd,
              env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}, cwd="/")


def mem_total():
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024


def parse_size(s):
    n = int("".join(c for c in s if c.isdigit()))
    unit = "".join(c for c in s if c.isalpha()).lower()
    return n << {"mb": 20, "gb": 30}[unit]


def autobase(s):
    """Autobase (postgresql_cluster) roles/pre_checks/tasks/huge_pages.yml:
    the number and the unit of the setting's text by regex; MB / 1024 or GB
    as is, cast to int and compared with 8; then (GB + 1) * 1024 * 1024 //
    Hugepagesize in kB. Below 8 GB nothing is set (None)."""
    n = int("".join(c for c in s if c.isdigit()))
    unit = "".join(c for c in s if c.isalpha()).lower()
    gb = n / 1024 if unit == "mb" else (n if unit == "gb" else 0)
    if int(gb) < 8:
        return None
    return int((gb + 1) * 1024 * 1024 // 2048)


def set_pool(n):
    with open(NR, "w") as f:
        f.write(str(n))
    return int(open(NR).read())


def starts(dd, log):
    """pg_ctl start with huge_pages = on: started? then stopped."""
    r = as_pg([PGBIN + "/pg_ctl", "-D", dd, "-l", log, "-w", "-t", "30", "start"])
    ok = r.returncode == 0
    if ok:
        as_pg([PGBIN + "/pg_ctl", "-D", dd, "-m", "fast", "-w", "stop"])
    return ok


def main():
    lock = os.open("/tmp/hugeshm-test-pool.lock",
                   os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(lock).st_mode):
        sys.exit("/tmp/hugeshm-test-pool.lock is not a regular file")
    fcntl.flock(lock, fcntl.LOCK_EX)
    before = open(NR).read().strip()
    work = tempfile.mkdtemp(prefix="hugeshm-ansible-measure-")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=work + "/coll", ANSIBLE_HOME=work + "/home",
               XDG_CACHE_HOME=work + "/cache",
               ANSIBLE_LOCAL_TEMP=work + "/lt", ANSIBLE_REMOTE_TEMP=work + "/rt",
               ANSIBLE_NOCOLOR="1", ANSIBLE_PYTHON_INTERPRETER="auto_silent",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    try:
        sh(["ansible-galaxy", "collection", "build", "--output-path", work, ROOT + "/contrib/ansible"], env=env)
        sh(["ansible-galaxy", "collection", "install", "-p", work + "/coll"]
           + glob.glob(work + "/hugeshm-hugeshm-*.tar.gz"), env=env)
        mt = mem_total()
        print("MemTotal %.1f GiB; hugeshm %s" % (mt / (1 << 30), HUGESHM))
        print("| shared_buffers | ÷ 2 MiB | + 3 % of RAM (TPA) | Autobase | postgres -C | collection |")
        rows = []
        for sb in SIZES:
            d = tempfile.mkdtemp(prefix="pg-", dir=work)
            os.chmod(work, 0o755)
            shutil.chown(d, "postgres", "postgres")
            dd = d + "/data"
            r = as_pg([PGBIN + "/initdb", "-D", dd, "-A", "trust", "-N"])
            assert r.returncode == 0, r.stderr
            with open(dd + "/postgresql.conf", "a") as f:
                f.write("shared_buffers = %s\nhuge_pages = on\nport = 5498\nunix_socket_directories = '%s'\n"
                        "listen_addresses = ''\n" % (sb, d))
            need = int(as_pg([PGBIN + "/postgres", "-D", dd, "-C", "shared_memory_size_in_huge_pages"]).stdout)
            b = parse_size(sb)
            counts = {
                "÷ 2 MiB": b // M2,
                "+3 % RAM": (b + int(0.03 * mt)) // M2,
                "Autobase": autobase(sb),
            }
            # The collection: pool at 0, hugeshm_pools postgres: [dd] (spare 2).
            set_pool(0)
            play = work + "/pools.yml"
            with open(play, "w") as f:
                f.write("- name: Pools\n  hosts: all\n  gather_facts: false\n  tasks:\n"
                        "    - name: Pools\n      hugeshm.hugeshm.hugeshm_pools:\n"
                        "        binary: %s\n        postgres: [%s]\n" % (HUGESHM, dd))
            r = sh(["ansible-playbook", "-i", "localhost,", "-c", "local", play], env=env)
            res = json.loads(r.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
            if r.returncode != 0:
                print("collection failed (%s): %s" % (sb, res.get("msg")))
            counts["collection"] = int(open(NR).read())
            result = {}
            for k, n in counts.items():
                if n is None:
                    result[k] = ("not set (pool stays 0)", starts_with(dd, d, 0))
                    continue
                got = set_pool(n)
                result[k] = ("%d" % n if got == n else "%d (kernel gave %d)" % (n, got),
                             starts(dd, d + "/log"))
            got = set_pool(need)
            result["postgres -C"] = ("%d" % need if got == need else "%d (kernel gave %d)" % (need, got),
                                     starts(dd, d + "/log"))
            fmt = lambda k: "%s, %s" % (result[k][0], "starts" if result[k][1] else "FATAL, no start")
            print("| %s | %s | %s | %s | %s | %s |" % (sb, fmt("÷ 2 MiB"), fmt("+3 % RAM"), fmt("Autobase"),
                                                       fmt("postgres -C"), fmt("collection")))
            rows.append((sb, dd, d))
        # Timing on the first (smallest) cluster, pool at 0.
        sb, dd, d = rows[0]
        set_pool(0)
        facts = work + "/facts.yml"
        with open(facts, "w") as f:
            f.write("- name: Facts\n  hosts: all\n  gather_facts: false\n  tasks:\n"
                    "    - name: Facts\n      hugeshm.hugeshm.hugeshm_facts:\n        binary: %s\n" % HUGESHM)
        for name, pb, extra in (("facts", facts, []), ("plan (--check --diff)", play, ["--check", "--diff"]),
                                ("apply", play, []), ("second run", play, [])):
            with open(play, "w") as f:
                f.write("- name: Pools\n  hosts: all\n  gather_facts: false\n  tasks:\n"
                        "    - name: Pools\n      hugeshm.hugeshm.hugeshm_pools:\n"
                        "        binary: %s\n        postgres: [%s]\n" % (HUGESHM, dd))
            t = time.time()
            r = sh(["ansible-playbook", "-i", "localhost,", "-c", "local"] + extra + [pb], env=env)
            dt = time.time() - t
            stats = json.loads(r.stdout)["stats"]["localhost"]
            print("%s (%s): %.2f s, changed=%d, pool %s" % (name, sb, dt, stats["changed"], open(NR).read().strip()))
    finally:
        set_pool(int(before))
        shutil.rmtree(work, ignore_errors=True)
        print("pool restored to", open(NR).read().strip())


def starts_with(dd, d, n):
    set_pool(n)
    return starts(dd, d + "/log")


if __name__ == "__main__":
    main()
