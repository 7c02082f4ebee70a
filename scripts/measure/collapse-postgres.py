#!/usr/bin/env python3
"""PostgreSQL 15, huge_pages=try with no pool (falls back to 4 KiB), 2 GiB
shared_buffers, pgbench -S -c 16 -j 2 throughout; hugeshm collapse --pid
POSTMASTER at t=20 s. Prints VmPTE sums, tps and p99 in windows
(docs/collapse.md). As root, on a host with no free 2 MiB huge page and no
cluster on port 5499; the cluster goes in a new private directory under
/tmp (mkdtemp), removed at the end.

    HUGESHM=target/release/hugeshm scripts/measure/collapse-postgres.py [THREADS]

THREADS: collapse's --threads (0 or none: one per CPU). shmem_enabled is
set to advise for the server's start only, under the test kit's lock, and
put back."""
import fcntl, glob, json, os, shutil, stat, subprocess, sys, tempfile, time

THREADS = sys.argv[1] if len(sys.argv) > 1 else "0"
HUGESHM = os.environ.get("HUGESHM", "hugeshm")
PGBIN = os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin")
D = tempfile.mkdtemp(prefix="hugeshm-pgm-")  # O_EXCL, mode 0700: nobody else's
SHMEM = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, text=True, capture_output=True, **kw).stdout

def pg(cmd):
    return sh(f"su postgres -c {json.dumps(cmd)}")

shutil.chown(D, "postgres", "postgres")
pg(f"{PGBIN}/initdb -D {D}/data -A trust")
with open(f"{D}/data/postgresql.conf", "a") as f:
    f.write(f"shared_buffers = 2GB\nhuge_pages = try\nmax_connections = 40\nport = 5499\n"
            f"unix_socket_directories = '{D}'\nlisten_addresses = ''\n")
# The test kit's lock: no link followed, no FIFO waited on, a regular file.
lock = os.open("/tmp/hugeshm-test-pool.lock",
               os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
if not stat.S_ISREG(os.fstat(lock).st_mode):
    sys.exit("/tmp/hugeshm-test-pool.lock is not a regular file")
fcntl.flock(lock, fcntl.LOCK_EX)
was = open(SHMEM).read().split("[")[1].split("]")[0]
open(SHMEM, "w").write("advise")
try:
    pg(f"{PGBIN}/pg_ctl -D {D}/data -l {D}/log -w start")
finally:
    open(SHMEM, "w").write(was)
    fcntl.flock(lock, fcntl.LOCK_UN)
try:
    psql = f"{PGBIN}/psql -h {D} -p 5499 -d postgres -qAt -c"
    pg(f"{PGBIN}/pgbench -h {D} -p 5499 -i -s 50 -q postgres")
    pg(f"{psql} \"create extension pg_prewarm\"")
    print("prewarmed blocks:", pg(f"{psql} \"select pg_prewarm('pgbench_accounts')\"").strip())
    pm = int(open(f"{D}/data/postmaster.pid").readline())
    def ptes():
        pids = [pm] + [int(p) for p in sh(f"pgrep -P {pm}").split()]
        tot = 0
        for p in pids:
            try:
                for l in open(f"/proc/{p}/status"):
                    if l.startswith("VmPTE:"):
                        tot += int(l.split()[1])
            except OSError:
                pass
        return len(pids), tot
    bench = subprocess.Popen(
        f"su postgres -c '{PGBIN}/pgbench -h {D} -p 5499 -S -n -c 16 -j 2 -T 50 -P 5 -l --log-prefix={D}/tx postgres'",
        shell=True, cwd=D, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.time()
    time.sleep(19)
    print("before: processes, VmPTE kB", ptes())
    c0 = time.time()
    args = [HUGESHM, "collapse", "--pid", str(pm), "--json"] + (["--threads", THREADS] if THREADS != "0" else [])
    r = subprocess.run(args, capture_output=True, text=True)
    c1 = time.time()
    v = json.loads(r.stdout)
    res = v["result"]
    print(f"collapse exit {r.returncode}: blocks {res['blocks']} collapsed {res['collapsed']} refused "
          f"{res['not_collapsed']['refused']} busy {res['not_collapsed']['busy']} in {res['seconds']:.2f} s, "
          f"{res['gbps']:.2f} GB/s, {res['threads']} threads")
    print("right after: processes, VmPTE kB", ptes())
    time.sleep(max(0, 44 - (time.time() - t0)))
    print("10 s later: processes, VmPTE kB", ptes())
    out, _ = bench.communicate()
    print(out.strip().splitlines()[-12:])
    lat = []
    for f in glob.glob(f"{D}/tx*"):
        for l in open(f):
            x = l.split()
            lat.append((int(x[4]) + int(x[5]) / 1e6, int(x[2])))
    def window(a, b, name):
        l = sorted(us for t, us in lat if a <= t < b)
        if not l:
            return
        p99 = l[int(len(l) * 0.99)]
        print(f"{name}: {len(l)/(b-a):.0f} tps, p99 {p99/1000:.2f} ms")
    window(c0 - 10, c0, "10 s before")
    window(c0, c1, f"during ({c1-c0:.1f} s)")
    window(c1, c1 + 10, "10 s after")
    log = open(f"{D}/log").read()
    print("server log errors:", [l for l in log.splitlines() if "ERROR" in l or "FATAL" in l or "PANIC" in l][:3])
finally:
    pg(f"{PGBIN}/pg_ctl -D {D}/data -m fast -w stop")
    shutil.rmtree(D)
