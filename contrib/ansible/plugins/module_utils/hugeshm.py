# -*- coding: utf-8 -*-
# Copyright: hugeshm contributors
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Shared by the hugeshm modules: the binary, vetted, and its JSON."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import stat

# The JSON schema these modules read (docs/json.md).
SCHEMA = 1


def _unsafe(st, uid):
    """Why a file or directory of this stat is not safe to trust, or None."""
    if st.st_uid not in (0, uid):
        return "owned by uid %d, neither root nor uid %d" % (st.st_uid, uid)
    if st.st_mode & stat.S_IWOTH and not (
        stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    ):
        return "writable by others (mode %04o)" % stat.S_IMODE(st.st_mode)
    if st.st_mode & stat.S_IWGRP and st.st_gid != 0:
        return "writable by group %d (mode %04o)" % (
            st.st_gid,
            stat.S_IMODE(st.st_mode),
        )
    return None


def resolve_binary(module, binary):
    """The hugeshm to run: `binary`, or the one on PATH, resolved through
    its links and vetted as hugeshm vets the postgres it runs: a regular
    file of root's (or the caller's) that nobody else can write, in
    directories nobody else can write. Fails the task otherwise."""
    uid = os.geteuid()
    if not binary:
        binary = shutil.which("hugeshm", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        if not binary:
            module.fail_json(
                msg="hugeshm is not installed: no hugeshm on PATH "
                "(/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)",
                fix="install the hugeshm package (the hugeshm.hugeshm.hugeshm role does), "
                "or name the binary with binary:",
            )
    if not os.path.isabs(binary):
        module.fail_json(msg="binary: %s is not an absolute path" % binary)
    real = os.path.realpath(binary)
    try:
        st = os.stat(real)
    except OSError as e:
        module.fail_json(msg="binary: %s: %s" % (real, e.strerror))
    if not stat.S_ISREG(st.st_mode):
        module.fail_json(msg="binary: %s is not a regular file" % real)
    why = _unsafe(st, uid)
    if why:
        module.fail_json(
            msg="binary: %s is %s: not run" % (real, why),
            fix="install hugeshm as root with mode 0755 in a root-owned directory",
        )
    d = os.path.dirname(real)
    while True:
        why = _unsafe(os.stat(d), uid)
        if why:
            module.fail_json(
                msg="binary: %s is in %s, which is %s: not run" % (real, d, why),
                fix="install hugeshm in a directory only root can write",
            )
        if d == "/":
            break
        d = os.path.dirname(d)
    return real


def run_json(module, argv, fail=True):
    """Runs hugeshm with `argv` (a list; no shell), returns (rc, document,
    stderr). A run that fails, or whose output is not a document of the
    schema these modules know, fails the task when `fail`."""
    rc, out, err = module.run_command(
        argv, environ_update={"LC_ALL": "C", "NO_COLOR": "1"}
    )
    doc = None
    if out.strip():
        try:
            doc = json.loads(out)
        except ValueError:
            doc = None
    if rc != 0:
        if fail:
            module.fail_json(
                msg=error_text(err) or "%s exited with %d" % (" ".join(argv), rc),
                rc=rc,
                cmd=argv,
                stderr=err,
            )
        return rc, doc, err
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        module.fail_json(
            msg="%s: not a hugeshm JSON document of schema %d" % (" ".join(argv), SCHEMA),
            cmd=argv,
            stdout=out[:4000],
            stderr=err,
        )
    return rc, doc, err


def error_text(err):
    """hugeshm's error lines, without the program name."""
    lines = [
        line[len("hugeshm: "):] if line.startswith("hugeshm: ") else line
        for line in err.strip().splitlines()
    ]
    return "\n".join(lines)


def page_size_name(size):
    """2097152 -> '2M', 1073741824 -> '1G' (as advise prints them)."""
    if size is None:
        return "unknown"
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return "%d%s" % (size >> shift, unit)
    return "%dB" % size
