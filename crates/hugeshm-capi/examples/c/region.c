/*
 * region.c: the hugeshm C API in one program.
 *
 * Creates a named region, writes to it, prints the report and detaches (the
 * region stays, as it would for other processes); then attaches it again by
 * name, reads the greeting back and destroys it.
 *
 * Build (after scripts/install-capi.sh):
 *     cc region.c $(pkg-config --cflags --libs hugeshm) -o region
 * Run:
 *     ./region NAME [SIZE_MIB [BACKEND [PAGE_SIZE [POLICY]]]]
 *     ./region demo 64 sysv 2m only     # 64 MiB on 2 MiB pages, or an error
 *     ./region demo 8 posix 4k off      # no huge pages needed
 * Defaults: 16 MiB, sysv, largest page size that fits, policy try.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hugeshm.h"

/* Prints an error (message, fix), frees it, returns 1. */
static int fail(const char *what, int code, hugeshm_error *err) {
    fprintf(stderr, "%s failed: %s (%s)\n", what, hugeshm_error_message(err),
            hugeshm_error_code_name(code));
    const char *fix = hugeshm_error_fix(err);
    if (fix != NULL) {
        fprintf(stderr, "  to fix: %s\n", fix);
    }
    hugeshm_error_free(err);
    return 1;
}

static void print_report(const hugeshm_region *region) {
    hugeshm_report r;
    if (hugeshm_region_report(region, &r) != HUGESHM_OK) {
        return;
    }
    printf("region %s (%s)\n", hugeshm_region_name(region), hugeshm_backend_name(r.backend));
    printf("  size            %" PRIu64 " bytes (asked %" PRIu64 "%s)\n", r.size_bytes,
           r.requested_bytes, r.rounded_up ? ", rounded up" : "");
    printf("  data            %" PRIu64 " bytes at offset %" PRIu64 " (after the header)\n",
           r.data_bytes, r.data_offset);
    printf("  page size       %" PRIu64 " bytes, verified in smaps %" PRIu64 "\n",
           r.page_size_bytes, r.verified_page_size_bytes);
    printf("  resident        %" PRIu64 " bytes\n", r.resident_bytes);
    printf("  policy          %s%s\n", hugeshm_policy_name(r.policy),
           r.fell_back ? ", FELL BACK" : "");
    if (r.fell_back) {
        printf("  reason          %s\n", hugeshm_region_reason(region));
    }
    printf("  pre-fault       %u threads, %.3f s, %.2f GB/s\n", r.prefault_threads,
           r.prefault_seconds, r.prefault_gbps);
    printf("  ready after     %.3f s\n", r.ready_seconds);
    if (r.shmid >= 0) {
        printf("  SysV            shmid %d, key 0x%08x\n", r.shmid, (unsigned)r.sysv_key);
    }
    if (hugeshm_region_path(region) != NULL) {
        printf("  path            %s\n", hugeshm_region_path(region));
    }
    for (size_t i = 0; i < hugeshm_region_warning_count(region); i++) {
        printf("  warning         %s\n", hugeshm_region_warning(region, i));
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 6) {
        fprintf(stderr, "usage: %s NAME [SIZE_MIB [BACKEND [PAGE_SIZE [POLICY]]]]\n", argv[0]);
        return 2;
    }
    const char *name = argv[1];
    uint64_t size_mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 16;
    hugeshm_backend backend = HUGESHM_BACKEND_SYSV;
    uint64_t page_size = 0; /* largest */
    hugeshm_policy policy = HUGESHM_POLICY_TRY;
    if ((argc > 3 && hugeshm_backend_parse(argv[3], &backend) != HUGESHM_OK) ||
        (argc > 4 && hugeshm_page_size_parse(argv[4], &page_size) != HUGESHM_OK) ||
        (argc > 5 && hugeshm_policy_parse(argv[5], &policy) != HUGESHM_OK)) {
        fprintf(stderr, "bad backend, page size or policy\n");
        return 2;
    }

    hugeshm_options *opts = hugeshm_options_new();
    if (hugeshm_options_set_size(opts, size_mib << 20) != HUGESHM_OK ||
        hugeshm_options_set_backend(opts, backend) != HUGESHM_OK ||
        hugeshm_options_set_page_size(opts, page_size) != HUGESHM_OK ||
        hugeshm_options_set_policy(opts, policy) != HUGESHM_OK ||
        hugeshm_options_set_name(opts, name) != HUGESHM_OK) {
        fprintf(stderr, "invalid option (size, page size or name)\n");
        hugeshm_options_free(opts);
        return 2;
    }

    hugeshm_region *region = NULL;
    hugeshm_error *err = NULL;
    int rc = hugeshm_create(opts, &region, &err);
    hugeshm_options_free(opts);
    if (rc != HUGESHM_OK) {
        return fail("create", rc, err);
    }
    print_report(region);

    char greeting[64];
    snprintf(greeting, sizeof greeting, "hello from pid %ld", (long)getpid());
    /* The first bytes of the mapping are the region's header: write the data. */
    memcpy(hugeshm_region_data_ptr(region), greeting, strlen(greeting) + 1);

    /* Unmap; the named region stays for other processes. */
    rc = hugeshm_detach(region, &err);
    if (rc != HUGESHM_OK) {
        return fail("detach", rc, err);
    }

    /* Any process can attach it by name now. */
    rc = hugeshm_attach(name, backend, &region, &err);
    if (rc != HUGESHM_OK) {
        return fail("attach", rc, err);
    }
    hugeshm_report found;
    hugeshm_region_report(region, &found);
    printf("attached again: %zu bytes on %" PRIu64 "-byte pages, created by pid %u, reads \"%s\"\n",
           hugeshm_region_len(region), hugeshm_region_page_size(region), found.creator_pid,
           (const char *)hugeshm_region_data_ptr(region));
    int same = strcmp((const char *)hugeshm_region_data_ptr(region), greeting) == 0;

    rc = hugeshm_destroy(region, &err);
    if (rc != HUGESHM_OK) {
        return fail("destroy", rc, err);
    }
    printf("destroyed\n");
    return same ? 0 : 1;
}
