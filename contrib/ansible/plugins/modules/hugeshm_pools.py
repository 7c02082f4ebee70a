#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hugeshm contributors
# SPDX-License-Identifier: MIT OR Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hugeshm_pools
short_description: Size and reserve a host's huge page pools from its own servers
version_added: "0.1.0"
description:
  - Runs C(hugeshm advise --json) with the sources given, then C(hugeshm apply
    --plan) on that plan; the pages each page size (and NUMA node, where the
    plan splits) needs are reserved live, all or nothing; with C(persist=true)
    the boot configuration (sysctl.d, tmpfiles.d, limits.d, systemd drop-ins)
    is written as C(apply --persist) writes it.
  - C(changed) only when a pool or a persisted file really changes; a second
    run with the same sources changes nothing.
  - In check mode it runs C(apply --dry-run) and compares the files, changing
    nothing, and says what would change; with C(--diff) it shows the pools
    per size and node and each persisted file before and after.
  - A plan the host cannot hold fails the task with hugeshm's numbers and fix,
    and every pool is left as it was (C(apply) restores them).
  - Never restarts a server. The services whose C(LimitMEMLOCK=) drop-in
    changed are returned in C(needs_restart) (they get the limit at their
    next start) and C(daemon_reload) says that systemd must reload.
options:
  postgres:
    description:
      - PostgreSQL data directories; each cluster is asked for its own
        C(shared_memory_size_in_huge_pages) (C(postgres -C) while it is down,
        the running server otherwise). C(advise --postgres), once per directory.
    type: list
    elements: path
    default: []
  postgres_bin:
    description:
      - The postgres binary (C(advise --postgres-bin)); default from each
        data directory's C(PG_VERSION).
    type: path
  size:
    description:
      - A region of this size (an SGA, C(shared_buffers), a cache), as
        C(advise --size) takes it, for example C(18G) or C(512M).
    type: str
  page_size:
    description: The page size of C(size) (default the kernel's default huge page size).
    type: str
    choices: [2m, 1g]
  node:
    description: Put the C(size) region on this NUMA node.
    type: int
  spread:
    description: Split the C(size) region evenly over every NUMA node.
    type: bool
    default: false
  spec:
    description: A hugeshm spec file on the host (TOML, regions; see docs/advise.md).
    type: path
  oracle:
    description: An Oracle Database text parameter file on the host (C(advise --oracle)).
    type: path
  live:
    description:
      - Also count the shared memory live on the host. It is what is counted
        when no other source is given.
    type: bool
    default: false
  spare:
    description: Spare pages added to each pool of pages under 1 GiB.
    type: int
    default: 2
  demote:
    description: Demote free 1 GiB pages where the 2 MiB pool grows (C(advise --demote)).
    type: bool
    default: false
  memlock_user:
    description: The user the limits.d memlock lines are for (a login name, C(@group) or C(:UID)).
    type: str
  systemd_unit:
    description: Services that get a C(LimitMEMLOCK=) drop-in.
    type: list
    elements: str
    default: []
  persist:
    description:
      - Also write the boot configuration, as C(apply --persist) does
        (atomically, the previous version kept as C(*.hugeshm-backup)).
    type: bool
    default: false
  root:
    description: The root under which C(persist) writes (C(apply --root)).
    type: path
    default: /
  binary:
    description:
      - The hugeshm binary to run, an absolute path. Default the one on the
        standard C(PATH).
      - Resolved through its links and vetted, a regular file of root's (or
        the caller's) that nobody else can write, in directories nobody else
        can write; otherwise the task fails and nothing is run.
    type: path
author:
  - hugeshm contributors
notes:
  - Changing pools needs root (C(become=true)).
  - The JSON it reads is schema 1 of hugeshm (docs/json.md).
seealso:
  - module: hugeshm.hugeshm.hugeshm_facts
"""

EXAMPLES = r"""
- name: Reserve what the host's PostgreSQL clusters need, and keep it at boot
  hugeshm.hugeshm.hugeshm_pools:
    postgres:
      - /var/lib/postgresql/15/main
    persist: true
  register: pools

- name: An 18 GiB SGA spread over the NUMA nodes, no spare pages
  hugeshm.hugeshm.hugeshm_pools:
    size: 18G
    spread: true
    spare: 0
    memlock_user: oracle

- name: Whatever the live segments use now
  hugeshm.hugeshm.hugeshm_pools:
    live: true

- name: Say which servers need a restart to get their new limits
  ansible.builtin.debug:
    msg: "restart when it suits: {{ pools.needs_restart | join(', ') }}"
  when: pools.needs_restart | length > 0
"""

RETURN = r"""
pools:
  description: Each pool the plan sets, before and after (C(after) is what the kernel granted; in check mode what would be requested).
  returned: always
  type: list
  elements: dict
  sample:
    - {page_size: 2M, page_size_bytes: 2097152, node: null, before: 0, after: 278}
files:
  description: Each file of the boot configuration with C(action) (C(created), C(updated), C(unchanged); in check mode what would be done); empty without C(persist).
  returned: always
  type: list
  elements: dict
  sample:
    - {path: /etc/sysctl.d/60-hugeshm.conf, action: created, backup: null}
needs_restart:
  description: Services whose memlock drop-in changed; they get it at their next start (never restarted here).
  returned: always
  type: list
  elements: str
daemon_reload:
  description: Whether a systemd drop-in changed (run C(systemctl daemon-reload)).
  returned: always
  type: bool
plan:
  description: The plan, C(hugeshm advise --json) (docs/json.md).
  returned: always
  type: dict
result:
  description: C(apply --json)'s C(result) (requested and granted pages per pool).
  returned: always
  type: dict
command:
  description: The same plan as a command line to run on the host.
  returned: always
  type: str
  sample: hugeshm apply --postgres /var/lib/postgresql/15/main
"""

import os
import shutil
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text
from ansible_collections.hugeshm.hugeshm.plugins.module_utils.hugeshm import (
    error_text,
    page_size_name,
    resolve_binary,
    run_json,
)

MAX_FILE = 1 << 20
DROPIN = "/60-hugeshm.conf"


def source_args(p):
    """advise's and apply's source options from the module's parameters."""
    a = []
    for dd in p["postgres"]:
        a += ["--postgres", dd]
    if p["postgres_bin"]:
        a += ["--postgres-bin", p["postgres_bin"]]
    if p["size"]:
        a += ["--size", p["size"]]
        if p["page_size"]:
            a += ["--page-size", p["page_size"]]
        if p["node"] is not None:
            a += ["--node", str(p["node"])]
        if p["spread"]:
            a.append("--spread")
    if p["spec"]:
        a += ["--spec", p["spec"]]
    if p["oracle"]:
        a += ["--oracle", p["oracle"]]
    if p["live"]:
        a.append("--live")
    a += ["--spare", str(p["spare"])]
    if p["demote"]:
        a.append("--demote")
    if p["memlock_user"]:
        a += ["--memlock-user", p["memlock_user"]]
    for u in p["systemd_unit"]:
        a += ["--systemd-unit", u]
    return a


def read_existing(path):
    """A configuration file's text, or None when absent. Not through a
    link, nothing but a regular file of root's or the caller's, at most
    1 MiB (apply refuses the rest, with the reason)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        return "(not readable: %s)\n" % e.strerror
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE:
            return "(not a regular file of at most 1 MiB)\n"
        if st.st_uid not in (0, os.geteuid()):
            # Shown in the diff: only root's or the caller's own text.
            return "(not shown: owned by uid %d)\n" % st.st_uid
        return to_text(os.read(fd, MAX_FILE), errors="surrogate_or_replace")
    finally:
        os.close(fd)


def under(root, path):
    return os.path.join(root, path.lstrip("/"))


def pool_rows(changes, after_key):
    rows = []
    for c in changes:
        rows.append({
            "page_size": page_size_name(c.get("page_size_bytes")),
            "page_size_bytes": c.get("page_size_bytes"),
            "node": c.get("node"),
            "before": c.get("before"),
            "after": c.get(after_key),
        })
    return rows


def pools_text(rows, key):
    return "".join(
        "%s %s: %s\n" % (r["page_size"], "all" if r["node"] is None else "node%s" % r["node"], r[key])
        for r in rows
    )


def unit_of(path):
    """The service of a drop-in path /etc/systemd/system/UNIT.d/60-hugeshm.conf."""
    if path.startswith("/etc/systemd/system/") and path.endswith(DROPIN):
        d = path[len("/etc/systemd/system/"):-len(DROPIN)]
        if d.endswith(".d") and "/" not in d:
            return d[:-2]
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            postgres=dict(type="list", elements="path", default=[]),
            postgres_bin=dict(type="path"),
            size=dict(type="str"),
            page_size=dict(type="str", choices=["2m", "1g"]),
            node=dict(type="int"),
            spread=dict(type="bool", default=False),
            spec=dict(type="path"),
            oracle=dict(type="path"),
            live=dict(type="bool", default=False),
            spare=dict(type="int", default=2),
            demote=dict(type="bool", default=False),
            memlock_user=dict(type="str"),
            systemd_unit=dict(type="list", elements="str", default=[]),
            persist=dict(type="bool", default=False),
            root=dict(type="path", default="/"),
            binary=dict(type="path"),
        ),
        mutually_exclusive=[("node", "spread")],
        required_by={"page_size": "size", "node": "size", "postgres_bin": "postgres"},
        supports_check_mode=True,
    )
    p = module.params
    if p["spread"] and not p["size"]:
        module.fail_json(msg="spread: needs size")
    binary = resolve_binary(module, p["binary"])
    sources = source_args(p)
    plan = run_json(module, [binary, "advise", "--json"] + sources)[1]
    for w in plan.get("warnings", []):
        module.warn(w)

    # What persist would write, against what is there now.
    files = []
    if p["persist"]:
        for f in plan.get("config", {}).get("files", []):
            before = read_existing(under(p["root"], f["path"]))
            files.append({
                "path": f["path"],
                "before": before,
                "after": f["content"],
                "action": "created" if before is None
                else ("unchanged" if before == f["content"] else "updated"),
            })

    workdir = tempfile.mkdtemp(prefix="hugeshm-pools-")
    try:
        plan_file = os.path.join(workdir, "plan.json")
        fd = os.open(plan_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(module.jsonify(plan))
        argv = [binary, "apply", "--plan", plan_file, "--json"]
        if module.check_mode:
            argv.append("--dry-run")
        elif p["persist"]:
            argv += ["--persist", "--root", p["root"]]
        rc, applied, err = run_json(module, argv, fail=False)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    command = "hugeshm apply " + " ".join(sources)
    if rc != 0:
        module.fail_json(
            msg=error_text(err) or "hugeshm apply exited with %d" % rc,
            rc=rc,
            stderr=err,
            plan=plan,
            command=command,
            changed=False,
        )

    result = applied.get("result") or {}
    changes = result.get("changes", [])
    if module.check_mode:
        rows = pool_rows(changes, "requested")
    else:
        rows = pool_rows(changes, "granted")
        # What apply really did to the files.
        done = dict((f.get("path"), f) for f in applied.get("persisted", []))
        for f in files:
            got = done.get(under(p["root"], f["path"]))
            if got:
                f["action"] = got.get("action")
                f["backup"] = got.get("backup")
    pools_changed = any(r["before"] != r["after"] for r in rows)
    files_changed = [f for f in files if f["action"] != "unchanged"]
    units = sorted(set(u for u in (unit_of(f["path"]) for f in files_changed) if u))

    diff = []
    if pools_changed:
        diff.append({
            "before_header": "huge page pools",
            "after_header": "huge page pools",
            "before": pools_text(rows, "before"),
            "after": pools_text(rows, "after"),
        })
    for f in files_changed:
        path = under(p["root"], f["path"])
        diff.append({
            "before_header": path,
            "after_header": path,
            "before": f["before"] or "",
            "after": f["after"],
        })

    module.exit_json(
        changed=bool(pools_changed or files_changed),
        pools=rows,
        files=[dict((k, v) for k, v in f.items() if k not in ("before", "after")) for f in files],
        needs_restart=units,
        daemon_reload=bool(units),
        plan=plan,
        result=result,
        command=command,
        diff=diff,
    )


if __name__ == "__main__":
    main()
