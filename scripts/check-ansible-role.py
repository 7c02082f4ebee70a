#!/usr/bin/env python3
"""The Ansible collection's role with the Debian package, on this machine.

Runs after scripts/build-deb.sh in CI (.ci/run), as root:

  * ansible-lint on the collection (contrib/ansible) and on the playbook of
    docs/fleet.md ("Many hosts"), the collection built with ansible-galaxy
    and installed into a temporary collections path;
  * that exact playbook, against localhost (-c local), as group `db`, with
    the .deb for hugeshm_deb, a temporary root for the persisted files and a
    16 MiB region (hugeshm_size) beside the host's clusters (down in CI,
    sized by postgres -C with their /etc configuration):
    the package is installed, the pools are what the role's plan says, the
    exporter's unit is enabled, the files are written under the root;
  * the same playbook again: changed=0 in the PLAY RECAP;
  * then the unit disabled, the package purged, the pools put back as they
    were and the temporary files removed, also when a step fails.

It holds the test kit's lock (/tmp/hugeshm-test-pool.lock) throughout and
refuses to run where a hugeshm package is installed already.

usage: scripts/check-ansible-role.py [DEB]   (default: target/debian/hugeshm_*.deb)
"""

import fcntl
import glob
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK = "/tmp/hugeshm-test-pool.lock"
POOLS = "/sys/kernel/mm/hugepages"
MARK = "<!-- tested: scripts/check-ansible-role.py runs this playbook -->"


def fail(msg):
    print("check-ansible-role: " + msg, file=sys.stderr)
    sys.exit(1)


def lock():
    """The test kit's lock: not through a link, a regular file, flock'd."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fail(LOCK + " is not a regular file")
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def pools():
    out = {}
    for d in sorted(glob.glob(POOLS + "/hugepages-*")):
        with open(d + "/nr_hugepages") as f:
            out[d + "/nr_hugepages"] = f.read().strip()
    return out


def restore(before):
    for path, value in before.items():
        with open(path, "w") as f:
            f.write(value)
    after = pools()
    if after != before:
        print("check-ansible-role: pools not restored: %s -> %s" % (before, after), file=sys.stderr)
        return False
    return True


def playbook_of_docs():
    """The yaml block after MARK in docs/fleet.md, as it stands."""
    with open(os.path.join(ROOT, "docs/fleet.md")) as f:
        text = f.read()
    at = text.find(MARK)
    if at < 0:
        fail("docs/fleet.md has no playbook marked " + MARK)
    start = text.index("```yaml\n", at) + len("```yaml\n")
    return text[start:text.index("```", start)]


def run(argv, env=None, cwd=None):
    p = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p


def installed():
    p = run(["dpkg-query", "-W", "-f=${Status}", "hugeshm"])
    return p.returncode == 0 and "installed" in p.stdout and "not-installed" not in p.stdout


def main():
    deb = sys.argv[1] if len(sys.argv) > 1 else None
    if not deb:
        debs = sorted(glob.glob(os.path.join(os.environ.get("CARGO_TARGET_DIR", ROOT + "/target"), "debian/hugeshm_*.deb")),
                      key=os.path.getmtime)
        deb = debs[-1] if debs else ""
    deb = os.path.abspath(deb)
    if not os.path.isfile(deb):
        fail("no package " + deb)
    if os.geteuid() != 0:
        fail("needs root (dpkg, the pools)")
    if installed():
        fail("a hugeshm package is installed already; not touching it")
    lock_fd = lock()
    before = pools()
    work = tempfile.mkdtemp(prefix="hugeshm-ansible-role.")
    env = dict(os.environ,
               ANSIBLE_COLLECTIONS_PATH=work + "/coll",
               ANSIBLE_HOME=work + "/home", XDG_CACHE_HOME=work + "/cache",
               ANSIBLE_LOCAL_TEMP=work + "/local-tmp",
               ANSIBLE_REMOTE_TEMP=work + "/remote-tmp",
               ANSIBLE_NOCOLOR="1",
               ANSIBLE_PYTHON_INTERPRETER="auto_silent",
               LC_ALL="C.UTF-8")
    ok = False
    try:
        p = run(["ansible-galaxy", "collection", "build", "--output-path", work, ROOT + "/contrib/ansible"], env)
        if p.returncode != 0:
            fail("ansible-galaxy build: " + p.stdout + p.stderr)
        p = run(["ansible-galaxy", "collection", "install", "-p", work + "/coll"]
                + glob.glob(work + "/hugeshm-hugeshm-*.tar.gz"), env)
        if p.returncode != 0:
            fail("ansible-galaxy install: " + p.stdout + p.stderr)
        print("== ansible-lint contrib/ansible")
        p = run(["ansible-lint", "--offline", "--nocolor"], env, cwd=ROOT + "/contrib/ansible")
        print(p.stdout + p.stderr)
        if p.returncode != 0:
            fail("ansible-lint on the collection failed")

        site = work + "/site.yml"
        with open(site, "w") as f:
            f.write(playbook_of_docs())
        print("== ansible-lint docs/fleet.md's playbook")
        p = run(["ansible-lint", "--offline", "--nocolor", "-p", site], env, cwd=work)
        print(p.stdout + p.stderr)
        if p.returncode != 0:
            fail("ansible-lint on docs/fleet.md's playbook failed")
        with open(work + "/hosts", "w") as f:
            f.write("[db]\nlocalhost ansible_connection=local\n")
        # The host's clusters are down in CI (.ci/run stops them) and sized
        # by postgres -C; a region of 16 MiB beside them, so that the role
        # reserves pages even on a host without a cluster.
        extra = {"hugeshm_deb": deb, "hugeshm_root": work + "/root", "hugeshm_size": "16M"}
        with open(work + "/vars.json", "w") as f:
            json.dump(extra, f)
        os.mkdir(work + "/root", 0o755)
        jenv = dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
        argv = ["ansible-playbook", "-i", work + "/hosts", "-e", "@" + work + "/vars.json", site]

        print("== the playbook of docs/fleet.md, first run")
        p = run(argv, jenv)
        doc = json.loads(p.stdout)
        if p.returncode != 0:
            fail("first run failed: " + json.dumps(doc["stats"]) + p.stdout[-6000:] + p.stderr)
        # Role tasks are named "hugeshm.hugeshm.hugeshm : NAME".
        tasks = dict((t["task"]["name"].split(" : ")[-1], t["hosts"].get("localhost", {}))
                     for t in doc["plays"][0]["tasks"])
        res = tasks["Size the pools from the host's servers and reserve them live"]
        print("   stats %s; plan %s; pools %s; files %s" % (
            doc["stats"]["localhost"], res["command"], res["pools"], [f["action"] for f in res["files"]]))
        if not installed() or not os.path.exists("/usr/bin/hugeshm"):
            fail("the role did not install the package")
        now = pools()
        for pool in res["plan"]["pools"]:
            if pool["node"] is not None:
                continue
            path = "%s/hugepages-%dkB/nr_hugepages" % (POOLS, pool["page_size_bytes"] // 1024)
            if now[path] != str(pool["pages"]):
                fail("%s is %s, the plan says %d" % (path, now[path], pool["pages"]))
        if not os.path.isfile(work + "/root/etc/sysctl.d/60-hugeshm.conf"):
            fail("hugeshm_persist wrote no sysctl.d file under the root")
        p = run(["systemctl", "is-enabled", "hugeshm-exporter.service"])
        if p.stdout.strip() != "enabled":
            fail("hugeshm-exporter.service is %r, not enabled" % p.stdout.strip())

        print("== second run")
        p = run(argv, jenv)
        doc = json.loads(p.stdout)
        if p.returncode != 0 or doc["stats"]["localhost"]["changed"] != 0:
            fail("second run: %s" % json.dumps(doc["stats"]))
        print("   stats %s" % doc["stats"]["localhost"])
        ok = True
    finally:
        run(["systemctl", "disable", "hugeshm-exporter.service"])
        if installed():
            p = run(["dpkg", "--purge", "hugeshm"])
            if p.returncode != 0:
                print(p.stdout + p.stderr, file=sys.stderr)
                ok = False
        cached = "/var/cache/" + os.path.basename(deb)
        if os.path.isfile(cached):
            os.unlink(cached)
        ok = restore(before) and ok
        shutil.rmtree(work, ignore_errors=True)
        os.close(lock_fd)
    if installed() or os.path.exists("/usr/bin/hugeshm"):
        fail("hugeshm is still installed after the purge")
    if not ok:
        sys.exit(1)
    print("check-ansible-role: ok (installed, reserved, enabled, second run changed=0, purged, pools restored)")


if __name__ == "__main__":
    main()
