/* The attacker of tests/region/lookalike.rs, run as an unprivileged user:
 * a file that looks like root's SysV attachment in /proc/PID/maps.
 *
 *   lookalike SHMID KEYHEX SIZE [ipc]
 *
 * In a user and mount namespace of its own it mounts a tmpfs, makes files
 * until one gets inode SHMID, names it /SYSV<KEYHEX>, maps SIZE bytes of it
 * shared, unlinks it and detaches the tmpfs: its maps line is then
 * "/SYSV<KEYHEX> (deleted)" with inode SHMID, as a real attachment's.
 * With "ipc" it attaches a real segment instead, of KEYHEX and SHMID, in an
 * IPC namespace of its own (made in a user namespace): the kernel's own
 * device and name, in another namespace. It prints "ready" and waits
 * until killed. Exit 2: bad arguments; 3: no user
 * namespace; 4: the inode was passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A segment of KEY and id SHMID in a new IPC namespace, attached.
 *
 * An id is seq * 32768 + idx. While few segments are in use the kernel
 * hands out idx cyclically below max(in_use * 3 / 2, 64) and counts seq up
 * at each wrap (ipc/util.c ipc_idr_alloc), so making and removing the
 * segment of KEY again and again reaches every id whose idx is below that
 * bound; for a larger idx, fillers held first raise the bound. */
static int real_elsewhere(unsigned long long shmid, const char *key, size_t size) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWIPC) != 0) {
        perror("unshare");
        return 3;
    }
    unsigned long long idx = shmid % 32768;
    for (unsigned long long i = 0; idx >= 64 && i < idx * 2 / 3 + 2; i++)
        if (shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600) < 0)
            return 3;
    key_t k = (key_t)strtoul(key, NULL, 16);
    int id = -1;
    for (long tries = 0; tries < 20000000; tries++) {
        id = shmget(k, size, IPC_CREAT | IPC_EXCL | 0600);
        if (id < 0)
            return 3;
        if ((unsigned long long)id == shmid)
            break;
        shmctl(id, IPC_RMID, NULL);
        id = -1;
    }
    if (id < 0) {
        fprintf(stderr, "shmid %llu not reached\n", shmid);
        return 4;
    }
    void *p = shmat(id, NULL, 0);
    shmctl(id, IPC_RMID, NULL);
    if (p == (void *)-1)
        return 3;
    memset(p, 1, size);
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5)
        return 2;
    unsigned long long shmid = strtoull(argv[1], NULL, 10);
    const char *key = argv[2];
    size_t size = strtoull(argv[3], NULL, 10);
    if (strlen(key) != 8 || size == 0)
        return 2;
    if (argc == 5)
        return strcmp(argv[4], "ipc") ? 2 : real_elsewhere(shmid, key, size);
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
        perror("unshare");
        return 3;
    }
    char map[64];
    snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
    if (write_file("/proc/self/setgroups", "deny") || write_file("/proc/self/uid_map", map))
        return 3;
    snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
    if (write_file("/proc/self/gid_map", map))
        return 3;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("lookalike", "/tmp", "tmpfs", 0, "size=64m,nr_inodes=100000") != 0) {
        perror("mount");
        return 3;
    }
    /* Inodes on a new tmpfs are numbered in order: spend them on unnamed
     * files (O_TMPFILE: no name to make and remove) up to SHMID - 1, then
     * the named one gets SHMID. */
    for (;;) {
        int t = open("/tmp", O_TMPFILE | O_RDWR, 0600);
        if (t < 0) {
            perror("open");
            return 3;
        }
        struct stat st;
        if (fstat(t, &st) != 0)
            return 3;
        close(t);
        if ((unsigned long long)st.st_ino + 1 >= shmid)
            break;
    }
    int fd = open("/tmp/f", O_CREAT | O_EXCL | O_RDWR, 0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return 3;
    if ((unsigned long long)st.st_ino != shmid) {
        fprintf(stderr, "got inode %llu, wanted %llu\n", (unsigned long long)st.st_ino, shmid);
        return 4;
    }
    char name[32];
    snprintf(name, sizeof name, "/tmp/SYSV%s", key);
    if (rename("/tmp/f", name) != 0 || ftruncate(fd, size) != 0) {
        perror("rename");
        return 3;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return 3;
    memset(p, 1, size);
    close(fd);
    unlink(name);
    if (umount2("/tmp", MNT_DETACH) != 0)
        return 3;
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
