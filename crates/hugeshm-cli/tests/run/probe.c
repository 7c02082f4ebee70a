/* The server `hugeshm run` is tested against (tests/run/run.rs, the guest's
 * run.sh): it makes the mappings its arguments name, reports each as one
 * JSON line (address, and what its own smaps and numa_maps say), holds them
 * while asked, then releases them the way a server does (munmap with the
 * length it asked for, shmdt and IPC_RMID) and reports that too.
 *
 *   probe ACTION...
 *     shared:SIZE       mmap(MAP_SHARED|MAP_ANONYMOUS)
 *     shared-huge:SIZE  mmap(MAP_SHARED|MAP_ANONYMOUS|MAP_HUGETLB)
 *     private:SIZE      mmap(MAP_PRIVATE|MAP_ANONYMOUS)
 *     private-full:SIZE the same, every page written (a server's own memory)
 *     shm:SIZE          shmget(IPC_PRIVATE, IPC_CREAT|0600) + shmat
 *     shm-huge:SIZE     the same with SHM_HUGETLB
 *     child             fork and exec this program with `lib`; relay its line
 *     lib               whether libhugeshm-run is mapped here, and the
 *                       environment it would pass on
 *     hold              print {"op":"hold"} and wait for a line on stdin
 *     sleep:MS          sleep MS milliseconds (a server that runs a while)
 *     reserve:SIZE      what MariaDB and the JVM do: reserve 4 x SIZE
 *                       PROT_NONE, commit SIZE 2 MiB-aligned inside it
 *                       (MAP_FIXED, reported as "commit"), fill it, then
 *                       cut into its pages: MADV_DONTNEED of one 4 KiB page,
 *                       an uncommit of 1 MiB (MAP_FIXED PROT_NONE), an
 *                       mprotect of 4 KiB, a re-commit of the 1 MiB; unmap
 *                       the reservation; report each result ("reserve")
 *     reserve-populate:SIZE  the same, the commit with MAP_POPULATE (MariaDB 11)
 *   SIZE in bytes, or with a k, m or g suffix.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

struct made {
    const char *op;
    void *addr;
    size_t asked;
    int shmid;
};

static struct made made[64];
static int nmade;

static size_t parse_size(const char *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    }
    return (size_t)v;
}

/* KernelPageSize, Size, resident (Rss + hugetlb) of the mapping at addr. */
static void smaps_of(void *addr, long *page_kb, long *size_kb, long *res_kb) {
    char line[512];
    FILE *f = fopen("/proc/self/smaps", "r");
    int in = 0;
    *page_kb = *size_kb = *res_kb = -1;
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        unsigned long start, end;
        long v;
        if (sscanf(line, "%lx-%lx ", &start, &end) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            if (in)
                break;
            in = start == (unsigned long)addr;
            if (in)
                *res_kb = 0;
            continue;
        }
        if (!in)
            continue;
        if (sscanf(line, "KernelPageSize: %ld kB", &v) == 1)
            *page_kb = v;
        else if (sscanf(line, "Size: %ld kB", &v) == 1)
            *size_kb = v;
        else if (sscanf(line, "Rss: %ld kB", &v) == 1 || sscanf(line, "Shared_Hugetlb: %ld kB", &v) == 1 ||
                 sscanf(line, "Private_Hugetlb: %ld kB", &v) == 1)
            *res_kb += v;
    }
    fclose(f);
}

/* The N<node>=<pages> fields of the numa_maps line at addr, space-separated. */
static void numa_of(void *addr, char *out, size_t n) {
    char line[4096], want[32];
    FILE *f = fopen("/proc/self/numa_maps", "r");
    out[0] = 0;
    if (!f)
        return;
    snprintf(want, sizeof want, "%lx ", (unsigned long)addr);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, want, strlen(want)))
            continue;
        for (char *t = strtok(line, " \n"); t; t = strtok(NULL, " \n")) {
            if (t[0] == 'N' && strchr(t, '=') && strlen(out) + strlen(t) + 2 < n) {
                if (out[0])
                    strcat(out, " ");
                strcat(out, t);
            }
        }
        break;
    }
    fclose(f);
}

static void report(const char *op, void *addr, size_t asked, int err, int shmid) {
    long page_kb = -1, size_kb = -1, res_kb = -1;
    char nodes[1024] = "";
    if (!err) {
        smaps_of(addr, &page_kb, &size_kb, &res_kb);
        numa_of(addr, nodes, sizeof nodes);
    }
    printf("{\"op\":\"%s\",\"asked\":%zu,\"addr\":\"%#lx\",\"errno\":%d,\"shmid\":%d,"
           "\"kernel_page_kb\":%ld,\"size_kb\":%ld,\"resident_kb\":%ld,\"nodes\":\"%s\"}\n",
           op, asked, err ? 0UL : (unsigned long)addr, err, shmid, page_kb, size_kb, res_kb, nodes);
    fflush(stdout);
}

static void keep(const char *op, void *addr, size_t asked, int shmid) {
    if (nmade < 64)
        made[nmade++] = (struct made){op, addr, asked, shmid};
}

static void do_reserve(size_t size, int populate) {
    const size_t M = 1 << 20;
    int rw = PROT_READ | PROT_WRITE, anon = MAP_PRIVATE | MAP_ANONYMOUS;
    char *r = mmap(NULL, 4 * size, PROT_NONE, anon | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) {
        report("commit", NULL, size, errno, -1);
        return;
    }
    char *a = (char *)(((unsigned long)r + 2 * M - 1) & ~(2 * M - 1));
    char *c = mmap(a, size, rw, anon | MAP_FIXED | (populate ? MAP_POPULATE : 0), -1, 0);
    report("commit", c == MAP_FAILED ? NULL : c, size, c == MAP_FAILED ? errno : 0, -1);
    if (c == MAP_FAILED)
        return;
    memset(c, 7, size);
    int e1 = madvise(c + M + 4096, 4096, MADV_DONTNEED) ? errno : 0;
    int zeroed = c[M + 4096] == 0, kept = c[M] == 7 && c[M + 8192] == 7 && c[0] == 7;
    int e2 = mmap(c + 3 * M, M, PROT_NONE, anon | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED ? errno : 0;
    int e3 = mprotect(c + 5 * M + 4096, 4096, PROT_READ) ? errno : 0;
    kept = kept && c[5 * M + 4096] == 7 && c[4 * M] == 7 && c[2 * M] == 7;
    int e4 = mmap(c + 3 * M, M, rw, anon | MAP_FIXED, -1, 0) == MAP_FAILED ? errno : 0;
    if (!e4) {
        c[3 * M] = 1;
        kept = kept && c[3 * M + 4096] == 0 && c[4 * M] == 7;
    }
    int e5 = munmap(r, 4 * size) ? errno : 0;
    printf("{\"op\":\"reserve\",\"madvise\":%d,\"uncommit\":%d,\"mprotect\":%d,"
           "\"recommit\":%d,\"munmap\":%d,\"zeroed\":%d,\"kept\":%d}\n",
           e1, e2, e3, e4, e5, zeroed, kept);
    fflush(stdout);
}

static void do_mmap(const char *op, size_t size, int flags, int full) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED) {
        report(op, NULL, size, errno, -1);
        return;
    }
    ((volatile char *)p)[0] = 1; /* the server's first touch */
    if (full)
        memset(p, 1, size);
    keep(op, p, size, -1);
    report(op, p, size, 0, -1);
}

static void do_shm(const char *op, size_t size, int huge) {
    int id = shmget(IPC_PRIVATE, size, IPC_CREAT | 0600 | (huge ? SHM_HUGETLB : 0));
    if (id < 0) {
        report(op, NULL, size, errno, -1);
        return;
    }
    void *p = shmat(id, NULL, 0);
    if (p == (void *)-1) {
        int e = errno;
        shmctl(id, IPC_RMID, NULL);
        report(op, NULL, size, e, id);
        return;
    }
    ((volatile char *)p)[0] = 1;
    keep(op, p, size, id);
    report(op, p, size, 0, id);
}

static void do_lib(void) {
    char line[4096];
    int loaded = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "libhugeshm-run.so") || strstr(line, "libhugeshm_run.so"))
            loaded = 1;
    if (f)
        fclose(f);
    const char *pre = getenv("LD_PRELOAD"), *run = getenv("HUGESHM_RUN");
    printf("{\"op\":\"lib\",\"pid\":%d,\"loaded\":%s,\"ld_preload\":%s%s%s,\"hugeshm_run\":%s}\n", (int)getpid(),
           loaded ? "true" : "false", pre ? "\"" : "", pre ? pre : "null", pre ? "\"" : "",
           run ? "true" : "false");
    fflush(stdout);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char *a = argv[i], *colon = strchr(a, ':');
        size_t size = colon ? parse_size(colon + 1) : 0;
        if (colon)
            *colon = 0;
        if (!strcmp(a, "shared"))
            do_mmap("shared", size, MAP_SHARED | MAP_ANONYMOUS, 0);
        else if (!strcmp(a, "shared-huge"))
            do_mmap("shared-huge", size, MAP_SHARED | MAP_ANONYMOUS | MAP_HUGETLB, 0);
        else if (!strcmp(a, "private"))
            do_mmap("private", size, MAP_PRIVATE | MAP_ANONYMOUS, 0);
        else if (!strcmp(a, "private-full"))
            do_mmap("private-full", size, MAP_PRIVATE | MAP_ANONYMOUS, 1);
        else if (!strcmp(a, "shm"))
            do_shm("shm", size, 0);
        else if (!strcmp(a, "shm-huge"))
            do_shm("shm-huge", size, 1);
        else if (!strcmp(a, "lib"))
            do_lib();
        else if (!strcmp(a, "child")) {
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                execl("/proc/self/exe", "probe", "lib", (char *)NULL);
                _exit(127);
            }
            int st;
            waitpid(pid, &st, 0);
        } else if (!strcmp(a, "reserve") || !strcmp(a, "reserve-populate")) {
            do_reserve(size, !strcmp(a, "reserve-populate"));
        } else if (!strcmp(a, "sleep")) {
            usleep((useconds_t)size * 1000);
        } else if (!strcmp(a, "hold")) {
            char buf[16];
            printf("{\"op\":\"hold\",\"pid\":%d}\n", (int)getpid());
            fflush(stdout);
            if (!fgets(buf, sizeof buf, stdin))
                buf[0] = 0;
        } else {
            fprintf(stderr, "probe: unknown action %s\n", a);
            return 2;
        }
    }
    for (int i = nmade - 1; i >= 0; i--) {
        int rc;
        if (made[i].shmid >= 0) {
            rc = shmdt(made[i].addr);
            shmctl(made[i].shmid, IPC_RMID, NULL);
        } else {
            rc = munmap(made[i].addr, made[i].asked);
        }
        printf("{\"op\":\"free\",\"of\":\"%s\",\"addr\":\"%#lx\",\"rc\":%d,\"errno\":%d}\n", made[i].op,
               (unsigned long)made[i].addr, rc, rc ? errno : 0);
    }
    return 0;
}
