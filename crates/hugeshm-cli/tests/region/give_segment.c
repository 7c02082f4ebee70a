/* give_segment SHMID UID: IPC_SET the owner uid of SysV segment SHMID to
 * UID, as its creator may (the kernel checks nothing of the new uid, and
 * the creator keeps an owner's rights through shm_perm.cuid). Used by
 * tests/region/foreign_headers.rs as uid 65534 giving its segment to root. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/shm.h>

int main(int argc, char **argv) {
    struct shmid_ds ds;
    if (argc != 3)
        return 2;
    int id = atoi(argv[1]);
    if (shmctl(id, IPC_STAT, &ds) < 0) {
        perror("IPC_STAT");
        return 1;
    }
    ds.shm_perm.uid = (uid_t)atoi(argv[2]);
    if (shmctl(id, IPC_SET, &ds) < 0) {
        perror("IPC_SET");
        return 1;
    }
    return 0;
}
