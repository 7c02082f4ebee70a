#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hugeshm contributors
# SPDX-License-Identifier: MIT OR Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hugeshm_facts
short_description: Huge page pools, findings and segments of a host as facts
version_added: "0.1.0"
description:
  - Runs C(hugeshm status --json) and C(hugeshm segments --json) on the host
    and sets the fact C(hugeshm) from them, so that a play can branch on the
    pools, the findings and the segments that fell back to 4 KiB pages, and a
    fleet can be reported on.
  - Reads only; never changes the host. Supports check mode.
  - Run as root to see other users' segments (their page size is read from
    C(/proc/PID/smaps)).
options:
  binary:
    description:
      - The hugeshm binary to run, an absolute path.
      - Default is the one on the standard C(PATH) (C(/usr/local/sbin) ... C(/bin)).
      - Either way it is resolved through its links and must be a regular
        file of root's (or the caller's) that nobody else can write, in
        directories nobody else can write; otherwise the task fails and
        nothing is run.
    type: path
  segments:
    description:
      - Also scan the segments (C(hugeshm segments --json)); every process's
        maps are read, which takes longer on a host with many processes.
    type: bool
    default: true
author:
  - hugeshm contributors
notes:
  - The JSON it reads is schema 1 of hugeshm (docs/json.md); another schema fails the task.
seealso:
  - module: hugeshm.hugeshm.hugeshm_pools
"""

EXAMPLES = r"""
- name: Read the huge page pools and segments
  hugeshm.hugeshm.hugeshm_facts:

- name: Warn where a server fell back to 4 KiB pages
  ansible.builtin.debug:
    msg: "{{ item.kind }} of {{ item.creator_name }} ({{ item.size_bytes }} B) is on 4 KiB pages"
  loop: "{{ ansible_facts.hugeshm.fell_back }}"

- name: Fail where the 2 MiB pool is short of what is reserved
  ansible.builtin.assert:
    that: "'pool-short' not in ansible_facts.hugeshm.findings_by_code"
"""

RETURN = r"""
ansible_facts:
  description: The fact C(hugeshm).
  returned: always
  type: complex
  contains:
    hugeshm:
      description: The host's huge page memory.
      type: complex
      returned: always
      contains:
        version:
          description: The output of C(hugeshm --version).
          type: str
          sample: hugeshm 0.1.0
        binary:
          description: The binary that was run.
          type: str
          sample: /usr/bin/hugeshm
        hugetlb_supported:
          description: Whether the kernel has hugetlb pages.
          type: bool
        default_page_size_bytes:
          description: The kernel's default huge page size.
          type: int
          sample: 2097152
        pools:
          description:
            - One row per page size host-wide (C(node) null) and per NUMA node,
              as C(status --json) has them, with C(page_size) added (C(2M), C(1G)).
            - C(reserved) is host-wide only (0 on node rows).
          type: list
          elements: dict
          sample:
            - {page_size: 2M, page_size_bytes: 2097152, node: null, total: 271,
               free: 250, reserved: 248, surplus: 0, available: 2}
        pools_by_size:
          description:
            - The same rows by page size, then C(all) or the node number
              (a string), as in C(pools_by_size['2M']['all'].total).
          type: dict
          sample: {"2M": {"all": {"total": 271, "free": 250}, "0": {"total": 271}}}
        findings:
          description:
            - Every finding of C(status) and C(segments), each with its
              C(severity), C(code), C(message) and C(fix), and C(source)
              (C(host), or the segment it was found on).
          type: list
          elements: dict
        findings_by_code:
          description: How many findings of each code (docs/findings.md).
          type: dict
          sample: {"pool-unused": 1, "silent-fallback": 1}
        worst:
          description: The highest severity found (C(ok), C(info), C(warning), C(critical)).
          type: str
          sample: warning
        segments:
          description:
            - Every shared memory segment C(segments) found (kind, C(id),
              C(path), C(size_bytes), C(page_size_bytes), C(page_size),
              C(resident_bytes), C(creator_pid), C(creator_name),
              C(attached_pids), C(nodes), C(on_huge_pages), finding codes).
            - Empty when C(segments=false).
          type: list
          elements: dict
        fell_back:
          description:
            - The segments that sit on 4 KiB pages where huge pages were
              meant (finding C(silent-fallback)), each a server to restart once
              the pools hold its pages.
          type: list
          elements: dict
        problems:
          description: Host files and processes that could not be read.
          type: list
          elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hugeshm.hugeshm.plugins.module_utils.hugeshm import (
    page_size_name,
    resolve_binary,
    run_json,
)

SEVERITY = ["ok", "info", "warning", "critical"]

POOL_KEYS = ("page_size_bytes", "node", "total", "free", "reserved", "surplus",
             "available", "default", "boot_pages", "can_get_pages")

SEGMENT_KEYS = ("kind", "id", "key", "path", "size_bytes", "page_size_bytes",
                "resident_bytes", "owner_uid", "creator_pid", "creator_name",
                "attached_pids", "nodes", "numa_policy")


def facts(status, segments):
    """The fact from the two documents (pure: tested without a host)."""
    pools = []
    by_size = {}
    for p in status.get("pools", []):
        row = dict((k, p.get(k)) for k in POOL_KEYS)
        row["page_size"] = page_size_name(p.get("page_size_bytes"))
        pools.append(row)
        where = "all" if row["node"] is None else str(row["node"])
        by_size.setdefault(row["page_size"], {})[where] = row
    findings = []
    for f in status.get("findings", []):
        findings.append(dict(f, source="host"))
    segs = []
    fell_back = []
    for s in (segments or {}).get("segments", []):
        seg = dict((k, s.get(k)) for k in SEGMENT_KEYS)
        seg["page_size"] = page_size_name(s.get("page_size_bytes"))
        seg["on_huge_pages"] = (s.get("page_size_bytes") or 0) > 4096
        seg["findings"] = [f.get("code") for f in s.get("findings", [])]
        segs.append(seg)
        label = "%s %s" % (s.get("kind"), s.get("id") if s.get("id") is not None else s.get("path"))
        for f in s.get("findings", []):
            findings.append(dict(f, source=label))
        if "silent-fallback" in seg["findings"]:
            fell_back.append(seg)
    for f in (segments or {}).get("findings", []):
        findings.append(dict(f, source="segments"))
    by_code = {}
    worst = 0
    for f in findings:
        by_code[f.get("code")] = by_code.get(f.get("code"), 0) + 1
        if f.get("severity") in SEVERITY:
            worst = max(worst, SEVERITY.index(f["severity"]))
    problems = list(status.get("problems", [])) + list((segments or {}).get("problems", []))
    return {
        "hugetlb_supported": status.get("hugetlb_supported"),
        "default_page_size_bytes": status.get("default_page_size_bytes"),
        "pools": pools,
        "pools_by_size": by_size,
        "findings": findings,
        "findings_by_code": by_code,
        "worst": SEVERITY[worst],
        "segments": segs,
        "fell_back": fell_back,
        "problems": problems,
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            binary=dict(type="path"),
            segments=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    binary = resolve_binary(module, module.params["binary"])
    rc, out, err = module.run_command([binary, "--version"])
    version = out.strip() if rc == 0 else None
    status = run_json(module, [binary, "status", "--json"])[1]
    segments = None
    if module.params["segments"]:
        segments = run_json(module, [binary, "segments", "--json"])[1]
    fact = facts(status, segments)
    fact["version"] = version
    fact["binary"] = binary
    module.exit_json(changed=False, ansible_facts={"hugeshm": fact})


if __name__ == "__main__":
    main()
