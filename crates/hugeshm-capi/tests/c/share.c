/*
 * share.c: the C test of libhugeshm, run by tests/c.rs.
 *
 *   share create NAME SIZE   create a SysV region on 2 MiB pages (policy only),
 *                            write the pattern, print "READY ...", wait for a
 *                            line on stdin, check the reply, destroy, "OK"
 *   share attach NAME PID    attach by name (a separate, unrelated process),
 *                            check the header (creator PID), page size and
 *                            pattern, write the reply, detach, "OK"
 *   share remove NAME CODE   hugeshm_remove must fail with the code named
 *                            CODE (e.g. in_use); "OK"
 *   share shortfall NAME PAGES
 *                            create PAGES x 2 MiB with policy only on a pool
 *                            with fewer available: POOL_SHORTFALL with the
 *                            numbers and the fix; nothing created; "OK"
 *   share reclaim NAME [DIR] a posix region nobody holds: creating it again is
 *                            HUGESHM_ERROR_ORPHANED, with reclaim reuse it
 *                            is reused with its contents; "OK". With DIR
 *                            (a directory on a tmpfs) the region lives
 *                            there, the fix names DIR, and only
 *                            hugeshm_remove_in with DIR removes it.
 *   share nulls              NULL and invalid arguments are errors, not
 *                            crashes; "OK"
 *
 * Exit status 0 only when every check passed; failures are printed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hugeshm.h"

#define MIB2 (UINT64_C(2) << 20)
#define REPLY_OFFSET 64
#define STRIDE 4096

static int failures = 0;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "CHECK FAILED %s:%d: %s: ", __FILE__, __LINE__,    \
                    #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            failures++;                                                        \
        }                                                                      \
    } while (0)

static int report_error(const char *what, int rc, hugeshm_error *err) {
    fprintf(stderr, "%s: %s (%s); fix: %s\n", what, hugeshm_error_message(err),
            hugeshm_error_code_name(rc),
            hugeshm_error_fix(err) ? hugeshm_error_fix(err) : "(none)");
    hugeshm_error_free(err);
    return 1;
}

/* The byte the creator writes at offset i (one per 4 KiB, across pages). */
static unsigned char pattern(size_t i) { return (unsigned char)((i / STRIDE) * 31 + 7); }

static int do_create(const char *name, uint64_t size) {
    hugeshm_options *o = hugeshm_options_new();
    CHECK(o != NULL, "options_new");
    CHECK(hugeshm_options_set_size(o, size) == HUGESHM_OK, "size");
    CHECK(hugeshm_options_set_backend(o, HUGESHM_BACKEND_SYSV) == HUGESHM_OK, "backend");
    CHECK(hugeshm_options_set_page_size(o, MIB2) == HUGESHM_OK, "page size");
    CHECK(hugeshm_options_set_policy(o, HUGESHM_POLICY_ONLY) == HUGESHM_OK, "policy");
    CHECK(hugeshm_options_set_prefault_threads(o, 2) == HUGESHM_OK, "threads");
    CHECK(hugeshm_options_set_name(o, name) == HUGESHM_OK, "name");
    hugeshm_region *r = NULL;
    hugeshm_error *err = NULL;
    int rc = hugeshm_create(o, &r, &err);
    hugeshm_options_free(o);
    if (rc != HUGESHM_OK) {
        return report_error("create", rc, err);
    }
    CHECK(err == NULL, "err is NULL on success");

    hugeshm_report rep;
    CHECK(hugeshm_region_report(r, &rep) == HUGESHM_OK, "report");
    CHECK(rep.created, "created");
    CHECK(rep.backend == HUGESHM_BACKEND_SYSV, "backend %u", rep.backend);
    CHECK(rep.policy == HUGESHM_POLICY_ONLY, "policy %u", rep.policy);
    CHECK(rep.size_bytes == size, "size %" PRIu64, rep.size_bytes);
    CHECK(rep.page_size_bytes == MIB2, "page %" PRIu64, rep.page_size_bytes);
    CHECK(rep.verified_page_size_bytes == MIB2, "verified %" PRIu64,
          rep.verified_page_size_bytes);
    CHECK(rep.resident_bytes == size, "resident %" PRIu64, rep.resident_bytes);
    CHECK(!rep.fell_back, "fell back: %s", hugeshm_region_reason(r));
    CHECK(hugeshm_region_reason(r) == NULL, "no reason");
    CHECK(rep.shmid >= 0 && rep.shmid == hugeshm_region_shmid(r), "shmid %d", rep.shmid);
    CHECK(rep.pid == (uint32_t)getpid(), "pid %u", rep.pid);
    CHECK(rep.creator_pid == (uint32_t)getpid(), "creator pid %u", rep.creator_pid);
    CHECK(rep.data_offset == 4096 && rep.data_bytes == size - 4096, "data %" PRIu64 " + %" PRIu64,
          rep.data_offset, rep.data_bytes);
    CHECK(rep.generation != 0 && rep.created_unix_ns != 0, "header generation and time");
    CHECK(hugeshm_region_data_offset(r) == 4096, "data offset");
    CHECK(hugeshm_region_data_len(r) == size - 4096, "data len");
    CHECK((char *)hugeshm_region_data_ptr(r) == (char *)hugeshm_region_ptr(r) + 4096, "data ptr");
    CHECK(rep.prefault_threads == 2, "threads %u", rep.prefault_threads);
    CHECK(strcmp(hugeshm_region_name(r), name) == 0, "name %s", hugeshm_region_name(r));
    CHECK(hugeshm_region_len(r) == size, "len %zu", hugeshm_region_len(r));
    CHECK(hugeshm_region_page_size(r) == MIB2, "page size");

    /* The first 4 KiB are the region's header: write the data only. */
    unsigned char *p = hugeshm_region_data_ptr(r);
    size_t len = hugeshm_region_data_len(r);
    for (size_t i = 0; i < len; i += STRIDE) {
        p[i] = pattern(i);
    }
    printf("READY shmid=%d pid=%ld size=%" PRIu64 " page=%" PRIu64 "\n", rep.shmid,
           (long)getpid(), rep.size_bytes, rep.page_size_bytes);
    fflush(stdout);

    /* The test runs the attacher, then writes a line. */
    char line[64];
    if (fgets(line, sizeof line, stdin) == NULL) {
        fprintf(stderr, "stdin closed before GO\n");
        failures++;
    }
    for (size_t i = 0; i < len; i += STRIDE) {
        unsigned char want = i == 0 ? pattern(0) : (unsigned char)~pattern(i);
        if (p[i] != want) {
            CHECK(p[i] == want, "reply byte at %zu: %u, want %u", i, p[i], want);
            break;
        }
    }
    char expect[32];
    snprintf(expect, sizeof expect, "reply %s", name);
    CHECK(strncmp((const char *)p + REPLY_OFFSET, expect, strlen(expect)) == 0, "reply text %.32s",
          (const char *)p + REPLY_OFFSET);

    rc = hugeshm_destroy(r, &err);
    if (rc != HUGESHM_OK) {
        return report_error("destroy", rc, err);
    }
    if (failures == 0) {
        printf("OK creator\n");
    }
    return failures != 0;
}

static int do_attach(const char *name, long creator) {
    hugeshm_region *r = NULL;
    hugeshm_error *err = NULL;
    int rc = hugeshm_attach(name, HUGESHM_BACKEND_SYSV, &r, &err);
    if (rc != HUGESHM_OK) {
        return report_error("attach", rc, err);
    }
    CHECK(err == NULL, "err is NULL on success");
    hugeshm_report rep;
    CHECK(hugeshm_region_report(r, &rep) == HUGESHM_OK, "report");
    CHECK(!rep.created, "attached, not created");
    CHECK(rep.page_size_bytes == MIB2, "page %" PRIu64, rep.page_size_bytes);
    CHECK(rep.verified_page_size_bytes == MIB2, "verified %" PRIu64,
          rep.verified_page_size_bytes);
    CHECK(hugeshm_region_page_size(r) == MIB2, "page size");
    CHECK(rep.shmid >= 0, "shmid");
    CHECK(rep.creator_pid == (uint32_t)creator, "creator pid %u from the header, want %ld",
          rep.creator_pid, creator);
    CHECK(rep.pid == (uint32_t)getpid(), "pid");
    CHECK(rep.holders >= 2, "holders %u (creator and this one)", rep.holders);
    CHECK(rep.data_offset == 4096 && rep.data_bytes == rep.size_bytes - 4096, "data");
    CHECK(rep.requested_bytes == rep.size_bytes, "requested %" PRIu64, rep.requested_bytes);

    unsigned char *p = hugeshm_region_data_ptr(r);
    size_t len = hugeshm_region_data_len(r);
    CHECK(len >= 2 * MIB2 - 4096, "len %zu", len);
    size_t bad = 0;
    for (size_t i = 0; i < len; i += STRIDE) {
        if (p[i] != pattern(i)) {
            if (bad++ == 0) {
                CHECK(p[i] == pattern(i), "pattern at %zu: %u, want %u", i, p[i], pattern(i));
            }
        }
    }
    for (size_t i = STRIDE; i < len; i += STRIDE) {
        p[i] = (unsigned char)~pattern(i);
    }
    snprintf((char *)p + REPLY_OFFSET, 64, "reply %s from %ld", name, (long)getpid());

    /* Faulted in here now: smaps of this process shows it on 2 MiB pages. */
    hugeshm_verification v;
    rc = hugeshm_region_verify(r, &v, &err);
    if (rc != HUGESHM_OK) {
        return report_error("verify", rc, err);
    }
    CHECK(v.hugetlb && v.page_size_bytes == MIB2, "smaps page %" PRIu64, v.page_size_bytes);
    CHECK(v.resident_bytes == hugeshm_region_len(r), "resident %" PRIu64 " of %zu",
          v.resident_bytes, hugeshm_region_len(r));

    /* The cheap check: the same page size, without walking page tables
       where the kernel answers PROCMAP_QUERY (6.11+). */
    hugeshm_page_size_check c;
    rc = hugeshm_region_verify_page_size(r, &c, &err);
    if (rc != HUGESHM_OK) {
        return report_error("verify_page_size", rc, err);
    }
    CHECK(c.hugetlb && c.page_size_bytes == MIB2, "query page %" PRIu64, c.page_size_bytes);
    printf("page size check: %" PRIu64 " via %s\n", c.page_size_bytes,
           c.procmap_query ? "PROCMAP_QUERY" : "smaps");

    rc = hugeshm_detach(r, &err);
    if (rc != HUGESHM_OK) {
        return report_error("detach", rc, err);
    }
    if (failures == 0) {
        printf("OK attacher pid=%ld len=%zu\n", (long)getpid(), len);
    }
    return failures != 0;
}

static int do_remove(const char *name, const char *want_code) {
    hugeshm_error *err = NULL;
    int rc = hugeshm_remove(name, HUGESHM_BACKEND_SYSV, &err);
    printf("remove: %s: %s\n", hugeshm_error_code_name(rc),
           err ? hugeshm_error_message(err) : "(removed)");
    CHECK(strcmp(hugeshm_error_code_name(rc), want_code) == 0, "code %s, want %s",
          hugeshm_error_code_name(rc), want_code);
    CHECK(hugeshm_error_code(err) == (err ? rc : HUGESHM_ERROR_INVALID_ARGUMENT), "code");
    hugeshm_error_free(err);
    if (failures == 0) {
        printf("OK remove\n");
    }
    return failures != 0;
}

static int do_shortfall(const char *name, uint64_t pages) {
    hugeshm_options *o = hugeshm_options_new();
    hugeshm_options_set_size(o, pages * MIB2);
    hugeshm_options_set_backend(o, HUGESHM_BACKEND_SYSV);
    hugeshm_options_set_page_size(o, MIB2);
    hugeshm_options_set_policy(o, HUGESHM_POLICY_ONLY);
    hugeshm_options_set_name(o, name);
    hugeshm_region *r = (hugeshm_region *)&failures; /* must be reset to NULL */
    hugeshm_error *err = NULL;
    int rc = hugeshm_create(o, &r, &err);
    hugeshm_options_free(o);

    CHECK(rc == HUGESHM_ERROR_POOL_SHORTFALL, "code %d (%s)", rc, hugeshm_error_code_name(rc));
    CHECK(r == NULL, "*out is NULL on error");
    CHECK(err != NULL, "error object");
    CHECK(hugeshm_error_code(err) == rc, "error code");
    const char *msg = hugeshm_error_message(err);
    const char *fix = hugeshm_error_fix(err);
    printf("message: %s\nfix: %s\n", msg ? msg : "(null)", fix ? fix : "(null)");
    CHECK(msg != NULL && strstr(msg, "required") != NULL, "message has 'required'");
    CHECK(msg != NULL && strstr(msg, "available") != NULL, "message has 'available'");
    CHECK(fix != NULL && strstr(fix, "nr_hugepages") != NULL, "fix names nr_hugepages");
    CHECK(msg != NULL && fix != NULL && strstr(msg, fix) != NULL, "message contains the fix");
    CHECK(hugeshm_error_errno(err) == 0, "no errno: caught before any system call");

    hugeshm_shortfall s;
    memset(&s, 0, sizeof s);
    CHECK(hugeshm_error_shortfall(err, &s), "shortfall numbers");
    CHECK(s.page_size_bytes == MIB2, "page %" PRIu64, s.page_size_bytes);
    CHECK(s.required == pages, "required %" PRIu64 ", want %" PRIu64, s.required, pages);
    CHECK(s.available < s.required, "available %" PRIu64, s.available);
    CHECK(s.available == s.free - s.reserved, "available = free - reserved");
    char want_fix[64];
    snprintf(want_fix, sizeof want_fix, "=%" PRIu64, s.nr_hugepages + (s.required - s.available));
    CHECK(fix != NULL && strstr(fix, want_fix) != NULL, "fix %s sets %s", fix, want_fix);
    hugeshm_error_free(err);

    /* Nothing was created: attaching finds nothing. */
    rc = hugeshm_attach(name, HUGESHM_BACKEND_SYSV, &r, NULL);
    CHECK(rc == HUGESHM_ERROR_NOT_FOUND, "attach after failed create: %s",
          hugeshm_error_code_name(rc));
    if (failures == 0) {
        printf("OK shortfall\n");
    }
    return failures != 0;
}

static int do_nulls(void) {
    hugeshm_region *r = NULL;
    hugeshm_error *err = NULL;

    int rc = hugeshm_create(NULL, &r, &err);
    CHECK(rc == HUGESHM_ERROR_INVALID_ARGUMENT, "create(NULL): %d", rc);
    CHECK(r == NULL, "out NULL");
    CHECK(err != NULL && strstr(hugeshm_error_message(err), "options") != NULL,
          "message names the argument: %s", hugeshm_error_message(err));
    CHECK(strstr(hugeshm_error_message(err), "hugeshm_create") != NULL, "and the function");
    CHECK(hugeshm_error_fix(err) == NULL, "no fix");
    hugeshm_error_free(err);

    hugeshm_options *o = hugeshm_options_new();
    hugeshm_options_set_size(o, 1 << 20);
    CHECK(hugeshm_create(o, NULL, NULL) == HUGESHM_ERROR_INVALID_ARGUMENT, "create(out NULL)");
    CHECK(hugeshm_options_set_backend(o, 0) == HUGESHM_ERROR_INVALID_ARGUMENT, "backend 0");
    CHECK(hugeshm_options_set_backend(o, 77) == HUGESHM_ERROR_INVALID_ARGUMENT, "backend 77");
    CHECK(hugeshm_options_set_policy(o, 9) == HUGESHM_ERROR_INVALID_ARGUMENT, "policy 9");
    CHECK(hugeshm_options_set_reclaim(o, 0) == HUGESHM_ERROR_INVALID_ARGUMENT, "reclaim 0");
    CHECK(hugeshm_options_set_page_size(o, 3 << 20) == HUGESHM_ERROR_INVALID_ARGUMENT, "3m");
    CHECK(hugeshm_options_set_name(o, NULL) == HUGESHM_ERROR_INVALID_ARGUMENT, "name NULL");
    CHECK(hugeshm_options_set_name(o, "a/b") == HUGESHM_ERROR_INVALID_ARGUMENT, "name a/b");
    CHECK(hugeshm_options_set_mode(o, 01777) == HUGESHM_ERROR_INVALID_ARGUMENT, "mode");
    CHECK(hugeshm_options_set_size(NULL, 1) == HUGESHM_ERROR_INVALID_ARGUMENT, "size(NULL)");
    hugeshm_options_free(o);
    hugeshm_options_free(NULL);

    rc = hugeshm_attach(NULL, HUGESHM_BACKEND_SYSV, &r, &err);
    CHECK(rc == HUGESHM_ERROR_INVALID_ARGUMENT && r == NULL, "attach(NULL)");
    hugeshm_error_free(err);
    rc = hugeshm_attach("x", 0, &r, &err);
    CHECK(rc == HUGESHM_ERROR_INVALID_ARGUMENT, "attach backend 0");
    CHECK(strstr(hugeshm_error_message(err), "backend") != NULL, "%s",
          hugeshm_error_message(err));
    hugeshm_error_free(err);
    rc = hugeshm_attach("hugeshm-capi-no-such-region", HUGESHM_BACKEND_SYSV, &r, &err);
    CHECK(rc == HUGESHM_ERROR_NOT_FOUND, "attach missing: %s", hugeshm_error_code_name(rc));
    hugeshm_error_free(err);
    rc = hugeshm_attach("x", HUGESHM_BACKEND_ANON, &r, &err);
    CHECK(rc == HUGESHM_ERROR_UNSUPPORTED, "attach anon: %s", hugeshm_error_code_name(rc));
    hugeshm_error_free(err);
    rc = hugeshm_attach_path("/nonexistent/hugeshm.x", &r, &err);
    CHECK(rc == HUGESHM_ERROR_NOT_FOUND, "attach_path missing: %s",
          hugeshm_error_code_name(rc));
    hugeshm_error_free(err);
    rc = hugeshm_remove("hugeshm-capi-no-such-region", HUGESHM_BACKEND_SYSV, NULL);
    CHECK(rc == HUGESHM_ERROR_NOT_FOUND, "remove missing: %s", hugeshm_error_code_name(rc));

    CHECK(hugeshm_detach(NULL, NULL) == HUGESHM_ERROR_INVALID_ARGUMENT, "detach(NULL)");
    CHECK(hugeshm_destroy(NULL, NULL) == HUGESHM_ERROR_INVALID_ARGUMENT, "destroy(NULL)");
    CHECK(hugeshm_region_ptr(NULL) == NULL, "ptr(NULL)");
    CHECK(hugeshm_region_len(NULL) == 0, "len(NULL)");
    CHECK(hugeshm_region_page_size(NULL) == 0, "page_size(NULL)");
    CHECK(hugeshm_region_name(NULL) == NULL, "name(NULL)");
    CHECK(hugeshm_region_reason(NULL) == NULL, "reason(NULL)");
    CHECK(hugeshm_region_data_ptr(NULL) == NULL, "data_ptr(NULL)");
    CHECK(hugeshm_region_data_len(NULL) == 0, "data_len(NULL)");
    CHECK(hugeshm_options_set_reclaim(NULL, HUGESHM_RECLAIM_REUSE) ==
              HUGESHM_ERROR_INVALID_ARGUMENT,
          "reclaim(NULL)");
    CHECK(hugeshm_region_shmid(NULL) == -1, "shmid(NULL)");
    hugeshm_report rep;
    CHECK(hugeshm_region_report(NULL, &rep) == HUGESHM_ERROR_INVALID_ARGUMENT, "report(NULL)");
    CHECK(hugeshm_error_message(NULL) == NULL, "message(NULL)");
    CHECK(hugeshm_error_fix(NULL) == NULL, "fix(NULL)");
    CHECK(hugeshm_error_code(NULL) == HUGESHM_ERROR_INVALID_ARGUMENT, "code(NULL)");
    CHECK(!hugeshm_error_shortfall(NULL, NULL), "shortfall(NULL)");
    hugeshm_error_free(NULL);
    CHECK(strcmp(hugeshm_error_code_name(HUGESHM_ERROR_IN_USE), "in_use") == 0, "code name");
    CHECK(strcmp(hugeshm_error_code_name(12345), "unknown") == 0, "unknown code name");
    CHECK(hugeshm_backend_name(0) == NULL, "backend name 0");
    CHECK(strlen(hugeshm_version()) > 0, "version");

    /* A region without huge pages, anywhere: anon, policy off. */
    o = hugeshm_options_new();
    hugeshm_options_set_size(o, 3 * 4096 + 1);
    hugeshm_options_set_policy(o, HUGESHM_POLICY_OFF);
    hugeshm_options_set_prefault_threads(o, 1);
    rc = hugeshm_create(o, &r, &err);
    hugeshm_options_free(o);
    if (rc != HUGESHM_OK) {
        return report_error("create anon", rc, err);
    }
    CHECK(hugeshm_region_report(r, NULL) == HUGESHM_ERROR_INVALID_ARGUMENT, "report(out NULL)");
    CHECK(hugeshm_region_report(r, &rep) == HUGESHM_OK, "report");
    CHECK(rep.size_bytes == 4 * 4096 && rep.rounded_up, "rounded up to %" PRIu64,
          rep.size_bytes);
    CHECK(rep.requested_bytes == 3 * 4096 + 1, "requested");
    CHECK(rep.backend == HUGESHM_BACKEND_ANON && rep.policy == HUGESHM_POLICY_OFF, "words");
    CHECK(hugeshm_region_name(r) == NULL && hugeshm_region_path(r) == NULL, "anonymous");
    CHECK(hugeshm_region_data_len(r) == 3 * 4096, "data len %zu", hugeshm_region_data_len(r));
    memset(hugeshm_region_data_ptr(r), 0x5a, hugeshm_region_data_len(r));
    CHECK(hugeshm_destroy(r, NULL) == HUGESHM_OK, "destroy anon");

    if (failures == 0) {
        printf("OK nulls\n");
    }
    return failures != 0;
}

/* A posix region on base pages (no root, no pool): detached, nobody holds it;
 * creating it again is refused (orphaned) unless reclaim says reuse, which
 * keeps its contents. */
static int do_reclaim(const char *name, const char *dir) {
    hugeshm_options *o = hugeshm_options_new();
    if (dir != NULL) {
        CHECK(hugeshm_options_set_directory(o, dir) == HUGESHM_OK, "directory %s", dir);
    }
    hugeshm_options_set_size(o, 1 << 20);
    hugeshm_options_set_backend(o, HUGESHM_BACKEND_POSIX);
    hugeshm_options_set_policy(o, HUGESHM_POLICY_OFF);
    hugeshm_options_set_page_size(o, 4096);
    hugeshm_options_set_name(o, name);
    hugeshm_region *r = NULL;
    hugeshm_error *err = NULL;
    int rc = hugeshm_create(o, &r, &err);
    if (rc != HUGESHM_OK) {
        hugeshm_options_free(o);
        return report_error("create", rc, err);
    }
    strcpy(hugeshm_region_data_ptr(r), "kept");
    CHECK(hugeshm_detach(r, NULL) == HUGESHM_OK, "detach");

    rc = hugeshm_create(o, &r, &err);
    printf("create again: %s: %s\n", hugeshm_error_code_name(rc),
           err ? hugeshm_error_message(err) : "(created)");
    CHECK(rc == HUGESHM_ERROR_ORPHANED, "code %s", hugeshm_error_code_name(rc));
    CHECK(hugeshm_error_fix(err) != NULL && strstr(hugeshm_error_fix(err), "reuse") != NULL,
          "fix says how to reuse: %s", hugeshm_error_fix(err));
    if (dir != NULL) {
        const char *fix = hugeshm_error_fix(err);
        char remove_in[512];
        snprintf(remove_in, sizeof remove_in,
                 "hugeshm_remove_in(\"%s\", HUGESHM_BACKEND_POSIX, \"%s\")", name, dir);
        CHECK(fix != NULL && strstr(fix, "hugeshm_options_set_directory") != NULL &&
                  strstr(fix, remove_in) != NULL,
              "fix names the directory: %s", fix);
    }
    hugeshm_error_free(err);
    if (rc == HUGESHM_OK) {
        hugeshm_destroy(r, NULL);
    }

    CHECK(hugeshm_options_set_reclaim(o, HUGESHM_RECLAIM_REUSE) == HUGESHM_OK, "reclaim");
    rc = hugeshm_create(o, &r, &err);
    hugeshm_options_free(o);
    if (rc != HUGESHM_OK) {
        hugeshm_remove_in(name, HUGESHM_BACKEND_POSIX, dir, NULL);
        return report_error("create with reclaim reuse", rc, err);
    }
    hugeshm_report rep;
    hugeshm_region_report(r, &rep);
    CHECK(rep.reclaimed == HUGESHM_RECLAIM_REUSE, "reclaimed %u", rep.reclaimed);
    CHECK(strcmp(hugeshm_region_data_ptr(r), "kept") == 0, "contents kept: %s",
          (const char *)hugeshm_region_data_ptr(r));
    if (dir == NULL) {
        CHECK(hugeshm_destroy(r, NULL) == HUGESHM_OK, "destroy");
    } else {
        /* Not found by name alone; found and removed in its directory. */
        CHECK(hugeshm_detach(r, NULL) == HUGESHM_OK, "detach");
        rc = hugeshm_remove(name, HUGESHM_BACKEND_POSIX, NULL);
        CHECK(rc == HUGESHM_ERROR_NOT_FOUND, "remove without the directory: %s",
              hugeshm_error_code_name(rc));
        rc = hugeshm_remove_in(name, HUGESHM_BACKEND_POSIX, dir, &err);
        CHECK(rc == HUGESHM_OK, "remove_in: %s", err ? hugeshm_error_message(err) : "");
        hugeshm_error_free(err);
    }
    if (failures == 0) {
        printf("OK reclaim\n");
    }
    return failures != 0;
}

/* NUMA placement: a bad placement string is refused and changes nothing;
 * "bind=NODE" puts every page of a 2 MiB-page region on that node, which
 * the region reports (placement, bytes per node). */
static int do_numa(uint32_t node, uint64_t pages) {
    hugeshm_options *o = hugeshm_options_new();
    CHECK(hugeshm_options_set_numa(o, "bind=x") == HUGESHM_ERROR_INVALID_ARGUMENT, "bind=x");
    CHECK(hugeshm_options_set_numa(o, NULL) == HUGESHM_ERROR_INVALID_ARGUMENT, "NULL");
    CHECK(hugeshm_options_set_numa(o, "per-node") == HUGESHM_ERROR_INVALID_ARGUMENT, "per-node");
    char placement[32];
    snprintf(placement, sizeof placement, "bind=%u", node);
    CHECK(hugeshm_options_set_numa(o, placement) == HUGESHM_OK, "%s", placement);
    hugeshm_options_set_size(o, pages * MIB2);
    hugeshm_options_set_page_size(o, MIB2);
    hugeshm_options_set_policy(o, HUGESHM_POLICY_ONLY);
    hugeshm_options_set_prefault_threads(o, 2);
    hugeshm_region *r = NULL;
    hugeshm_error *err = NULL;
    int rc = hugeshm_create(o, &r, &err);
    hugeshm_options_free(o);
    if (rc != HUGESHM_OK) {
        return report_error("create", rc, err);
    }
    const char *got = hugeshm_region_placement(r);
    printf("placement %s, node %u: %" PRIu64 " bytes\n", got ? got : "(null)", node,
           hugeshm_region_node_bytes(r, node));
    CHECK(got != NULL && strcmp(got, placement) == 0, "placement %s", got ? got : "(null)");
    CHECK(hugeshm_region_node_bytes(r, node) == pages * MIB2, "all pages on node %u", node);
    CHECK(hugeshm_region_node_bytes(r, node + 1) == 0, "none on node %u", node + 1);
    CHECK(hugeshm_region_node_bytes(NULL, node) == 0, "NULL region");
    CHECK(hugeshm_region_placement(NULL) == NULL, "NULL region placement");
    CHECK(hugeshm_destroy(r, NULL) == HUGESHM_OK, "destroy");
    if (failures == 0) {
        printf("OK numa\n");
    }
    return failures != 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "create") == 0) {
        return do_create(argv[2], strtoull(argv[3], NULL, 10));
    }
    if (argc >= 4 && strcmp(argv[1], "attach") == 0) {
        return do_attach(argv[2], strtol(argv[3], NULL, 10));
    }
    if (argc >= 4 && strcmp(argv[1], "remove") == 0) {
        return do_remove(argv[2], argv[3]);
    }
    if (argc >= 4 && strcmp(argv[1], "shortfall") == 0) {
        return do_shortfall(argv[2], strtoull(argv[3], NULL, 10));
    }
    if (argc >= 3 && strcmp(argv[1], "reclaim") == 0) {
        return do_reclaim(argv[2], argc >= 4 ? argv[3] : NULL);
    }
    if (argc >= 4 && strcmp(argv[1], "numa") == 0) {
        return do_numa((uint32_t)strtoul(argv[2], NULL, 10), strtoull(argv[3], NULL, 10));
    }
    if (argc >= 2 && strcmp(argv[1], "nulls") == 0) {
        return do_nulls();
    }
    fprintf(stderr, "usage: %s create|attach|remove|shortfall|reclaim|numa|nulls ...\n", argv[0]);
    return 2;
}
