/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server --scsi: the kernel's objects, through configfs.
 *
 * For each export a TCMU backstore core/user_PID/sect4k-PID-I (served by
 * tcmu.c through its /dev/uioN), and one tcm_loop target
 * loopback/naa.353344bPPPPPPPPP/tpgt_1 with a nexus and LUN I linked to
 * backstore I: the kernel's SCSI disk /dev/sdX.  PID (the server's, in
 * decimal in the backstores, in hex in the target's name) marks them as
 * ours: a later start removes those of a PID that no longer runs, and
 * nothing else. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sect4k/zone.h"
#include "tcmu.h"

void log_msg (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

/* snprintf for paths and messages: a truncated path fails where it is
 * used, with its name in the message. */
static void __attribute__ ((format (printf, 3, 4)))
fmt (char *buf, size_t len, const char *format, ...)
{
  va_list ap;
  va_start (ap, format);
  vsnprintf (buf, len, format, ap);
  va_end (ap);
}

#define TARGET "/sys/kernel/config/target"
#define CORE TARGET "/core"
#define LOOP TARGET "/loopback"
/* naa. + NAA 3 (locally assigned) + "S4K" in hex + the pid in 9 hex
 * digits: 16 digits, as tcm_loop wants. */
#define WWN_PREFIX "naa.353344b"
#define INITIATOR_PREFIX "naa.353344c"
/* The kernel's data area holds at least this many of the longest
 * commands at once (its pages are allocated as commands need them). */
#define DATA_AREA_COMMANDS 2
/* The kernel's SCSI scan under qemu TCG on a busy machine is slow. */
#define DISK_WAIT_S 60

struct scsi_lun {
  struct s4k_export *x;
  struct s4k_scsi_lun *lun;
  struct tcmu_ring *ring;
  char backstore[PATH_MAX];     /* core/user_PID/sect4k-PID-I, if made */
  char lun_dir[PATH_MAX];       /* .../tpgt_1/lun/lun_I, if made */
  char link[PATH_MAX];          /* lun_dir/sect4k, if made */
  char sd[32];                  /* "sdb" */
};

struct scsi_front {
  size_t n;
  struct scsi_lun *v;
  char hba[PATH_MAX];           /* core/user_PID, if made */
  char wwn[PATH_MAX];           /* loopback/naa..., if made */
  char tpg[PATH_MAX];           /* wwn/tpgt_1, if made */
  bool nexus;
};

static bool
exists (const char *path)
{
  struct stat st;
  return lstat (path, &st) == 0;
}

static int
write_file (const char *path, const char *value, char *err, size_t errlen)
{
  int fd = open (path, O_WRONLY | O_CLOEXEC);
  size_t len = strlen (value);
  if (fd == -1 || write (fd, value, len) != (ssize_t) len) {
    int e = errno;
    fmt (err, errlen, "writing \"%s\" to %s: %s", value, path,
              s4k_strerror (e));
    if (fd != -1)
      close (fd);
    return -1;
  }
  close (fd);
  return 0;
}

static int
read_line (const char *path, char *buf, size_t len)
{
  FILE *f = fopen (path, "r");
  if (!f)
    return -1;
  char *s = fgets (buf, len, f);
  fclose (f);
  if (!s)
    return -1;
  buf[strcspn (buf, "\n")] = '\0';
  return 0;
}

static int
make_dir (const char *path, char *err, size_t errlen)
{
  if (mkdir (path, 0755) == 0)
    return 0;
  if (errno == EEXIST)
    fmt (err, errlen, "%s exists already: busy (another sect4k-server "
              "with this pid's name?)", path);
  else
    fmt (err, errlen, "mkdir %s: %s", path, s4k_strerror (errno));
  return -1;
}

static void
remove_dir (const char *path)
{
  if (rmdir (path) == -1 && errno != ENOENT)
    log_msg ("--scsi: rmdir %s: %s", path, s4k_strerror (errno));
}

int
scsi_check (char *err, size_t errlen)
{
  if (!exists ("/sys/module/target_core_user")) {
    fmt (err, errlen, "--scsi: the kernel module target_core_user is "
              "not loaded (modprobe target_core_user tcm_loop, as root)");
    return -1;
  }
  if (!exists ("/sys/module/tcm_loop") && !exists (LOOP)) {
    fmt (err, errlen, "--scsi: the kernel module tcm_loop is not "
              "loaded (modprobe tcm_loop, as root)");
    return -1;
  }
  if (geteuid () != 0) {
    fmt (err, errlen, "--scsi: needs root (it creates the disk "
              "through configfs, " TARGET ")");
    return -1;
  }
  if (!exists (CORE)) {
    fmt (err, errlen, "--scsi: no " CORE ": configfs is not mounted "
              "(mount -t configfs none /sys/kernel/config)");
    return -1;
  }
  return 0;
}

/* ---- a dead instance's leftovers ---------------------------------------- */

static bool
pid_dead (long pid)
{
  return pid > 0 && pid != getpid () && kill (pid, 0) == -1 &&
         errno == ESRCH;
}

/* A target of ours: its LUN links, LUNs, nexus, tpgt, the target. */
static void
remove_target (const char *wwn)
{
  char tpg[PATH_MAX], luns[PATH_MAX], p[PATH_MAX + 300];
  fmt (tpg, sizeof tpg, "%s/tpgt_1", wwn);
  fmt (luns, sizeof luns, "%s/lun", tpg);
  DIR *d = opendir (luns);
  struct dirent *e;
  while (d && (e = readdir (d))) {
    if (strncmp (e->d_name, "lun_", 4) != 0)
      continue;
    char lun[PATH_MAX + 300];
    fmt (lun, sizeof lun, "%s/%s", luns, e->d_name);
    DIR *l = opendir (lun);
    struct dirent *f;
    while (l && (f = readdir (l))) {
      fmt (p, sizeof p, "%s/%s", lun, f->d_name);
      struct stat st;
      if (lstat (p, &st) == 0 && S_ISLNK (st.st_mode) && unlink (p) == -1)
        log_msg ("--scsi: unlink %s: %s", p, s4k_strerror (errno));
    }
    if (l)
      closedir (l);
    remove_dir (lun);
  }
  if (d)
    closedir (d);
  char ignored[256];
  fmt (p, sizeof p, "%s/nexus", tpg);
  if (exists (p))
    write_file (p, "NULL", ignored, sizeof ignored);
  remove_dir (tpg);
  remove_dir (wwn);
}

/* Removes the targets and backstores of sect4k-servers that no longer
 * run.  Those of a live one, and everything not named like ours, stay. */
static void
clean_dead (void)
{
  DIR *d = opendir (LOOP);
  struct dirent *e;
  const size_t plen = strlen (WWN_PREFIX);
  while (d && (e = readdir (d))) {
    char *end;
    if (strncmp (e->d_name, WWN_PREFIX, plen) != 0 ||
        strlen (e->d_name) != plen + 9)
      continue;
    long pid = strtol (e->d_name + plen, &end, 16);
    if (*end || !pid_dead (pid))
      continue;
    char wwn[PATH_MAX];
    fmt (wwn, sizeof wwn, LOOP "/%s", e->d_name);
    log_msg ("--scsi: removing %s, left by sect4k-server %ld (not running)",
             wwn, pid);
    remove_target (wwn);
  }
  if (d)
    closedir (d);
  if (!(d = opendir (CORE)))
    return;
  while ((e = readdir (d))) {
    char *end;
    if (strncmp (e->d_name, "user_", 5) != 0)
      continue;
    long pid = strtol (e->d_name + 5, &end, 10);
    if (*end || !pid_dead (pid))
      continue;
    char hba[PATH_MAX], prefix[64];
    fmt (hba, sizeof hba, CORE "/%s", e->d_name);
    fmt (prefix, sizeof prefix, "sect4k-%ld-", pid);
    DIR *h = opendir (hba);
    struct dirent *f;
    bool others = false;
    while (h && (f = readdir (h))) {
      if (f->d_name[0] == '.' || strcmp (f->d_name, "hba_info") == 0 ||
          strcmp (f->d_name, "hba_mode") == 0)
        continue;
      if (strncmp (f->d_name, prefix, strlen (prefix)) != 0) {
        others = true;          /* not ours: the HBA stays too */
        continue;
      }
      char dev[PATH_MAX + 300];
      fmt (dev, sizeof dev, "%s/%s", hba, f->d_name);
      log_msg ("--scsi: removing %s, left by sect4k-server %ld (not "
               "running)", dev, pid);
      remove_dir (dev);
    }
    if (h)
      closedir (h);
    if (!others)
      remove_dir (hba);
  }
  closedir (d);
}

/* ---- start and stop ------------------------------------------------------ */

/* /dev/uioN of backstore NAME: its uio device is "tcm-user/HBA/NAME/...". */
static int
find_uio (const char *hba_id, const char *name, char *uio, size_t len)
{
  char want[256], path[300], line[512];
  fmt (want, sizeof want, "tcm-user/%s/%s/", hba_id, name);
  DIR *d = opendir ("/sys/class/uio");
  struct dirent *e;
  int r = -1;
  while (d && (e = readdir (d))) {
    fmt (path, sizeof path, "/sys/class/uio/%s/name", e->d_name);
    if (read_line (path, line, sizeof line) == 0 &&
        strncmp (line, want, strlen (want)) == 0) {
      fmt (uio, len, "%s", e->d_name);
      r = 0;
      break;
    }
  }
  if (d)
    closedir (d);
  return r;
}

/* SMART's sector counts (interface=sata): the fault layer's. */
static void
lun_bad_counts (void *dev, uint64_t *bad, uint64_t *repaired)
{
  s4k_dev_bad_counts (dev, bad, repaired);
}

static int
make_backstore (struct scsi_front *f, size_t i, bool readonly, bool verbose,
                char *err, size_t errlen)
{
  struct scsi_lun *u = &f->v[i];
  struct s4k_dev *dev = u->x->dev;
  const struct s4k_geometry *g = s4k_dev_geometry (dev);
  struct s4k_scsi_params p;
  const uint32_t max = s4k_dev_max_request (dev);
  s4k_scsi_params_from_config (&p, &u->x->cfg, g, max);
  p.zones = s4k_dev_zones (dev);
  p.readonly = p.readonly || readonly || s4k_dev_readonly (dev);
  p.bad_counts = lun_bad_counts;
  p.bad_opaque = dev;
  s4k_scsi_params_formats (&p, dev);    /* sg_format --size: 512e <-> 4Kn */
  /* A geometry that could switch but whose store would not keep it:
   * say once why FORMAT UNIT will refuse a new block length. */
  const uint32_t other = g->logical == 512 ? 4096 : 512;
  char why[256];
  if (g->physical >= 4096 &&
      s4k_dev_logical_ok (dev, other, why, sizeof why) == -ENOTSUP)
    log_msg ("--scsi: export %s: sg_format --size=%" PRIu32 " will be "
             "refused: %s", u->x->name && *u->x->name ? u->x->name : "-",
             other, why);
  char e2[256];
  if (!(u->lun = s4k_scsi_lun_new (&p, e2, sizeof e2))) {
    fmt (err, errlen, "--scsi: export %s: %s", u->x->name, e2);
    return -1;
  }
  const long pid = getpid ();
  fmt (u->backstore, sizeof u->backstore, "%s/sect4k-%ld-%zu", f->hba,
            pid, i);
  if (make_dir (u->backstore, err, errlen) == -1) {
    u->backstore[0] = '\0';
    return -1;
  }
  char path[PATH_MAX + 32], value[256];
  fmt (path, sizeof path, "%s/control", u->backstore);
  /* nl_reply_supported=-1: no netlink daemon (tcmu-runner) answers for
   * this device; we are its handler. */
  /* hw_max_sectors: the kernel splits nothing longer than the Block
   * Limits page allows; max_data_area_mb: room for such commands. */
  const uint64_t area_mb = ((uint64_t) p.max_request * DATA_AREA_COMMANDS
                            + (1u << 20) - 1) >> 20;
  fmt (value, sizeof value, "dev_config=sect4k/%ld/%zu,dev_size=%" PRIu64
       ",hw_block_size=%" PRIu32 ",hw_max_sectors=%" PRIu32
       ",max_data_area_mb=%" PRIu64 ",nl_reply_supported=-1", pid, i,
       g->size, g->logical, p.max_request / g->logical,
       area_mb < 8 ? 8 : area_mb);
  if (write_file (path, value, err, errlen) == -1)
    return -1;
  /* The target core's own serial: a mark for whoever lists configfs. */
  fmt (path, sizeof path, "%s/wwn/vpd_unit_serial", u->backstore);
  fmt (value, sizeof value, "sect4k-%ld-%zu", pid, i);
  if (write_file (path, value, e2, sizeof e2) == -1 && verbose)
    log_msg ("--scsi: %s", e2);
  fmt (path, sizeof path, "%s/enable", u->backstore);
  if (write_file (path, "1", err, errlen) == -1)
    return -1;
  char uio[64], hba_id[32], name[64];
  fmt (hba_id, sizeof hba_id, "%ld", pid);
  fmt (name, sizeof name, "sect4k-%ld-%zu", pid, i);
  if (find_uio (hba_id, name, uio, sizeof uio) == -1) {
    fmt (err, errlen, "--scsi: no /sys/class/uio device for %s (is "
              "uio loaded?)", u->backstore);
    return -1;
  }
  if (!(u->ring = tcmu_ring_start (uio, dev, u->lun, verbose, e2,
                                   sizeof e2))) {
    fmt (err, errlen, "--scsi: %s", e2);
    return -1;
  }
  return 0;
}

/* Waits for LUN i's disk: /sys/class/scsi_disk/H:0:T:I/device/block/sdX. */
static int
find_disk (struct scsi_front *f, size_t i, char *err, size_t errlen)
{
  char path[PATH_MAX + 32], addr[64];
  fmt (path, sizeof path, "%s/address", f->tpg);
  if (read_line (path, addr, sizeof addr) == -1) {
    fmt (err, errlen, "--scsi: %s: %s", path, s4k_strerror (errno));
    return -1;
  }
  char blk[PATH_MAX];
  fmt (blk, sizeof blk, "/sys/class/scsi_disk/%s:%zu/device/block",
            addr, i);
  for (int t = 0; t < DISK_WAIT_S * 10; t++) {
    DIR *d = opendir (blk);
    struct dirent *e;
    while (d && (e = readdir (d)))
      if (e->d_name[0] != '.') {
        fmt (f->v[i].sd, sizeof f->v[i].sd, "%s", e->d_name);
        break;
      }
    if (d)
      closedir (d);
    if (f->v[i].sd[0]) {
      /* The block device node: devtmpfs makes it at once, udev soon. */
      fmt (path, sizeof path, "/dev/%s", f->v[i].sd);
      for (int k = 0; k < 50 && !exists (path); k++)
        nanosleep (&(struct timespec) { .tv_nsec = 100000000 }, NULL);
      return 0;
    }
    nanosleep (&(struct timespec) { .tv_nsec = 100000000 }, NULL);
  }
  fmt (err, errlen, "--scsi: the kernel made no disk at %s in %d s",
            blk, DISK_WAIT_S);
  return -1;
}

/* The /dev/disk/by-id link to /dev/sdX, where udev made one. */
static void
find_by_id (const char *sd, char *out, size_t len)
{
  out[0] = '\0';
  DIR *d = opendir ("/dev/disk/by-id");
  struct dirent *e;
  while (d && (e = readdir (d))) {
    char p[PATH_MAX], target[PATH_MAX];
    fmt (p, sizeof p, "/dev/disk/by-id/%s", e->d_name);
    ssize_t n = readlink (p, target, sizeof target - 1);
    if (n <= 0)
      continue;
    target[n] = '\0';
    const char *base = strrchr (target, '/');
    base = base ? base + 1 : target;
    /* wwn- names are the stable identifier (VPD 83h); scsi- others. */
    if (strcmp (base, sd) == 0 && (!out[0] ||
                                   strncmp (e->d_name, "wwn-", 4) == 0))
      fmt (out, len, "%s", p);
  }
  if (d)
    closedir (d);
}

struct scsi_front *
scsi_start (struct s4k_exports *t, bool readonly, bool verbose, FILE *out,
            char *err, size_t errlen)
{
  struct scsi_front *f = calloc (1, sizeof *f);
  if (!f || !(f->v = calloc (t->n, sizeof *f->v))) {
    free (f);
    fmt (err, errlen, "out of memory");
    return NULL;
  }
  f->n = t->n;
  for (size_t i = 0; i < t->n; i++)
    f->v[i].x = &t->v[i];
  clean_dead ();
  const long pid = getpid ();
  fmt (f->hba, sizeof f->hba, CORE "/user_%ld", pid);
  if (make_dir (f->hba, err, errlen) == -1) {
    f->hba[0] = '\0';
    goto fail;
  }
  for (size_t i = 0; i < f->n; i++)
    if (make_backstore (f, i, readonly, verbose, err, errlen) == -1)
      goto fail;

  if (mkdir (LOOP, 0755) == -1 && errno != EEXIST) {
    fmt (err, errlen, "--scsi: mkdir " LOOP ": %s (is tcm_loop "
              "loaded?)", s4k_strerror (errno));
    goto fail;
  }
  fmt (f->wwn, sizeof f->wwn, LOOP "/" WWN_PREFIX "%09lx", pid);
  if (make_dir (f->wwn, err, errlen) == -1) {
    f->wwn[0] = '\0';
    goto fail;
  }
  fmt (f->tpg, sizeof f->tpg, "%s/tpgt_1", f->wwn);
  if (make_dir (f->tpg, err, errlen) == -1) {
    f->tpg[0] = '\0';
    goto fail;
  }
  char path[PATH_MAX + 32], value[64];
  fmt (path, sizeof path, "%s/nexus", f->tpg);
  fmt (value, sizeof value, INITIATOR_PREFIX "%09lx", pid);
  if (write_file (path, value, err, errlen) == -1)
    goto fail;
  f->nexus = true;
  for (size_t i = 0; i < f->n; i++) {
    struct scsi_lun *u = &f->v[i];
    fmt (u->lun_dir, sizeof u->lun_dir, "%s/lun/lun_%zu", f->tpg, i);
    if (make_dir (u->lun_dir, err, errlen) == -1) {
      u->lun_dir[0] = '\0';
      goto fail;
    }
    /* The kernel scans the new LUN here: INQUIRY and the rest go
     * through the ring, already served. */
    fmt (u->link, sizeof u->link, "%s/sect4k", u->lun_dir);
    if (symlink (u->backstore, u->link) == -1) {
      fmt (err, errlen, "--scsi: linking %s to %s: %s", u->link,
                u->backstore, s4k_strerror (errno));
      u->link[0] = '\0';
      goto fail;
    }
  }
  for (size_t i = 0; i < f->n; i++)
    if (find_disk (f, i, err, errlen) == -1)
      goto fail;
  for (size_t i = 0; i < f->n; i++) {
    char id[PATH_MAX];
    find_by_id (f->v[i].sd, id, sizeof id);
    const char *name = f->v[i].x->name[0] ? f->v[i].x->name : "-";
    if (out)
      fprintf (out, "/dev/%s %s%s%s\n", f->v[i].sd, name, id[0] ? " " : "",
               id);
    else
      log_msg ("/dev/%s %s%s%s", f->v[i].sd, name, id[0] ? " " : "", id);
  }
  if (out)
    fflush (out);
  return f;
fail:
  scsi_stop (f);
  return NULL;
}

const char *
scsi_front_disk (const struct scsi_front *f, size_t i)
{
  return f->v[i].sd;
}

void
scsi_stop (struct scsi_front *f)
{
  if (!f)
    return;
  char ignored[256];
  /* The disks go first, while the rings still answer (sd's last
   * SYNCHRONIZE CACHE comes through them). */
  for (size_t i = 0; i < f->n; i++) {
    struct scsi_lun *u = &f->v[i];
    if (u->link[0] && unlink (u->link) == -1)
      log_msg ("--scsi: unlink %s: %s", u->link, s4k_strerror (errno));
    if (u->lun_dir[0])
      remove_dir (u->lun_dir);
  }
  if (f->nexus) {
    char path[PATH_MAX + 32];
    fmt (path, sizeof path, "%s/nexus", f->tpg);
    write_file (path, "NULL", ignored, sizeof ignored);
  }
  if (f->tpg[0])
    remove_dir (f->tpg);
  if (f->wwn[0])
    remove_dir (f->wwn);
  for (size_t i = 0; i < f->n; i++) {
    struct scsi_lun *u = &f->v[i];
    tcmu_ring_stop (u->ring);
    if (u->backstore[0])
      remove_dir (u->backstore);
    s4k_scsi_lun_free (u->lun);
  }
  if (f->hba[0])
    remove_dir (f->hba);
  free (f->v);
  free (f);
}
